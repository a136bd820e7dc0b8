/**
 * CPU per construction of `execute`'s handler context (`LocalHandlerContext`), in a process that
 * has made no other context ("alone") and in one that first made a million received and saga-step
 * contexts ("after the receive path"), as a service that both receives and executes does.
 *
 * Each case runs in a fresh child process (V8's feedback is per process). Each child warms up with
 * 1,000,000 constructions, then times 11 rounds of 3,000,000 by `process.cpuUsage()`; every context
 * is kept in a ring of 1,024 so it escapes, as it does on the real path (the handler gets it). The
 * table shows the fastest round and the median. Compare two builds by running each build's copy one
 * after the other. Run: `npm run bench:build && node .bench/bench/handler-context.js`.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { LocalHandlerContext, NO_OPTIONS, ReceivedHandlerContext } from '../src/dispatch/handler-context.js';
import type { HandlerContextEnv } from '../src/dispatch/handler-context.js';
import type { MessageDefinition } from '../src/messages/definition.js';
import type { Envelope } from '../src/messages/envelope.js';
import { SagaStepContext } from '../src/sagas/saga-context.js';
import { median, table } from './support.js';

const WARM_UP = 1_000_000;
const PER_ROUND = 3_000_000;
const ROUNDS = 11;
const CASES = ['alone', 'after the receive path'] as const;

const env: HandlerContextEnv = { now: () => 1, maxBytes: 1_000_000, encode: JSON.stringify };
const definition = { type: 'bench.T', partitionKeyOf: () => undefined } as unknown as MessageDefinition;
const envelope = {
  v: 1,
  id: '0190b8e2-7c1a-7abc-8def-0123456789ab',
  kind: 'event',
  type: 'bench.T',
  payload: {},
  meta: { correlationId: '0190b8e2-7c1a-7abc-8def-0123456789ab', occurredAt: '', headers: {} },
} as unknown as Envelope;
const signal = (): AbortSignal => new AbortController().signal;
const ring: unknown[] = new Array<unknown>(1024).fill(null);
let sum = 0;

function receivePath(n: number): void {
  for (let i = 0; i < n; i++) {
    const received = new ReceivedHandlerContext(envelope, 1, 'e', 'h', signal, env);
    const step = new SagaStepContext(envelope, 1, 'e', 's', signal, env, 'id', false, {}, []);
    sum += received.recorded.length + step.recorded.length + received.attempt;
  }
}

function constructLocal(n: number): void {
  for (let i = 0; i < n; i++) {
    const context = new LocalHandlerContext(
      definition,
      { i },
      1_000 + (i >> 10),
      NO_OPTIONS,
      'e',
      'h',
      signal,
      env,
    );
    sum += context.recorded.length + context.attempt;
    ring[i & 1023] = context;
  }
}

/** Runs one case in this process; returns CPU ns per construction of each round, sorted. */
function runCase(name: string): number[] {
  if (name === CASES[1]) receivePath(WARM_UP);
  constructLocal(WARM_UP);
  const rounds: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const start = process.cpuUsage();
    constructLocal(PER_ROUND);
    const used = process.cpuUsage(start);
    rounds.push(((used.user + used.system) * 1000) / PER_ROUND);
  }
  if (sum <= 0) throw new Error('nothing was constructed');
  return rounds.sort((a, b) => a - b);
}

const only = process.argv[2];
if (only !== undefined) {
  console.log(JSON.stringify(runCase(only)));
} else {
  const self = fileURLToPath(import.meta.url);
  const body = CASES.map((name) => {
    const rounds = JSON.parse(execFileSync(process.execPath, [self, name], { encoding: 'utf8' })) as number[];
    return [name, (rounds[0] ?? Number.NaN).toFixed(1), median(rounds).toFixed(1)];
  });
  console.log(
    `new LocalHandlerContext, CPU ns per construction, ${ROUNDS} rounds of ${PER_ROUND.toLocaleString('en-US')}`,
  );
  console.log(table(['process', 'fastest round', 'median'], body));
}
