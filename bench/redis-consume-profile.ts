/**
 * Where the CPU of a Redis consume goes: Harrier's consume (or a bare BullMQ `Worker` on the same
 * jobs, `BENCH_BARE=1`) under the V8 sampling profiler, the consume window only, printed as a
 * self-time table in µs per message.
 *
 * The jobs are published by Harrier's `BullMqBroker` as in `bench/redis.ts` (untimed, unprofiled);
 * the profile covers from `bus.start()` (or `new Worker`) until N messages are handled, of the first
 * round after a warm-up. Rows group by function; the last table groups by library. The bare worker's
 * table is the floor: what BullMQ, ioredis and the socket cost with Harrier's job shape.
 *
 * Run: `npm run bench:redis-consume-profile` (BENCH_N, default 20000; BENCH_BARE=1; BENCH_DEDUPE=
 * while-queued for the jobs of a definition with `dedupe: 'while-queued'`, no deduplication id;
 * BENCH_PROFILE_OUT to also write the .cpuprofile for DevTools) against `REDIS_URL` (default
 * redis://127.0.0.1:6379).
 */
import 'reflect-metadata';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { silentLogger } from '../src/index.js';
import { prepareMessage, type OutgoingMessage } from '../src/extend.js';
import { BullMqBroker } from '../src/redis/index.js';
import { PlaceOrder, PlaceOrderWhileQueued, payloadOf, placeOrderBus } from './place-order.js';
import { Counter, benchPrefix, deleteKeys, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const BARE = process.env.BENCH_BARE === '1';
const DEDUPE = process.env.BENCH_DEDUPE === 'while-queued' ? 'while-queued' : 'window';
const DEFINITION = DEDUPE === 'window' ? PlaceOrder : PlaceOrderWhileQueued;
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
/** The profiler's sampling interval, µs. */
const SAMPLING_US = 200;
const CONCURRENCY = 16;

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
}
interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: SAMPLING_US });
const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });

/** Publishes `n` messages as Harrier does, then consumes them; returns the profile when asked. */
async function run(n: number, profile: boolean): Promise<Profile | undefined> {
  const prefix = benchPrefix();
  const handled = new Counter(180_000);
  const broker = new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
  const bus = placeOrderBus(
    broker,
    CONCURRENCY,
    () => {
      handled.hit();
    },
    DEDUPE,
  );
  const workerConnection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  let worker: Worker | undefined;
  let result: Profile | undefined;
  try {
    await broker.register('bench', [
      { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
    ]);
    for (let from = 0; from < n; from += 1000) {
      const now = Date.now();
      const messages: OutgoingMessage[] = [];
      for (let i = from; i < Math.min(n, from + 1000); i++) {
        messages.push(prepareMessage(DEFINITION, payloadOf(i), {}, { now }).outgoing);
      }
      await broker.publishBatch(messages);
    }
    const cpu = process.cpuUsage();
    const started = performance.now();
    if (profile) await session.post('Profiler.start');
    if (BARE) {
      worker = new Worker(`cmd~${PlaceOrder.type}`, () => Promise.resolve(), {
        connection: workerConnection,
        prefix,
        concurrency: CONCURRENCY,
      });
      worker.on('completed', () => {
        handled.hit();
      });
    } else {
      await bus.start();
    }
    await handled.until(n);
    if (profile) result = (await session.post('Profiler.stop')).profile as Profile;
    const used = process.cpuUsage(cpu);
    console.log(
      `${BARE ? 'bare Worker' : 'Harrier'} (dedupe '${DEDUPE}'): ${Math.round(n / ((performance.now() - started) / 1000))} msg/s, CPU ${((used.user + used.system) / n).toFixed(1)} µs/msg${profile ? ' (profiled)' : ''}`,
    );
  } finally {
    await worker?.close();
    workerConnection.disconnect();
    await bus.stop();
    await deleteKeys(admin, prefix);
  }
  return result;
}

/** The library or Harrier folder a profile row belongs to. */
function groupOf(url: string, name: string): string {
  const harrier = /\/src\/([^/]+)\//.exec(url);
  if (harrier !== null) return `harrier ${harrier[1] ?? ''}`;
  const library = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (library !== null) return library[1] ?? url;
  return name.startsWith('(') ? name : `node/native ${name === 'writeBuffer' ? '(writeBuffer)' : ''}`.trim();
}

function print(profile: Profile, n: number): void {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const rows = new Map<string, number>();
  const groups = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const frame = byId.get(id)?.callFrame;
    if (frame === undefined) return;
    const delta = profile.timeDeltas[i] ?? 0;
    total += delta;
    const where = frame.url.replace(/.*node_modules\//, '').replace(/.*\.bench\//, '');
    const row = `${frame.functionName || '(anonymous)'} ${where}${where === '' ? '' : `:${frame.lineNumber + 1}`}`;
    rows.set(row, (rows.get(row) ?? 0) + delta);
    const group = groupOf(frame.url, frame.functionName);
    groups.set(group, (groups.get(group) ?? 0) + delta);
  });
  const perMessage = (us: number): string => (us / n).toFixed(2);
  const top = (map: Map<string, number>, count: number): string[][] =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, count)
      .map(([key, us]) => [key, perMessage(us), `${((100 * us) / total).toFixed(1)}%`]);
  console.log(`\nSelf time, µs per message (total ${perMessage(total)}):`);
  console.log(table(['function', 'µs/msg', 'share'], top(rows, 40)));
  console.log('');
  console.log(table(['group', 'µs/msg', 'share'], top(groups, 25)));
}

await run(Math.min(N, 2_000), false);
const profile = await run(N, true);
admin.disconnect();
if (profile !== undefined) {
  print(profile, N);
  const out = process.env.BENCH_PROFILE_OUT;
  if (out !== undefined) writeFileSync(out, JSON.stringify(profile));
}
session.disconnect();
