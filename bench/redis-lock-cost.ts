/**
 * What BullMqBroker's lock timings cost Redis: the commands per second one worker process makes Redis
 * serve, idle and busy, with the former defaults (lock 30 s, renewed every 15 s, stalled check every
 * 30 s) and the current ones (lock 5 s, renewed every 2.5 s, stalled check every 2.5 s), side by
 * side in one run.
 *
 * The worker is one endpoint, dispatcher concurrency {@link CONCURRENCY}, of one of two shapes: 4
 * command types (4 queues, a BullMQ Worker each), or 20 ordered command types over the default 8
 * partitions (28 queues: one per type and the 8 partition queues the endpoint's ordered types share,
 * the ordered endpoint of bench/ordering.ts). Two states:
 *
 * - idle: nothing to do; what remains is BullMQ's stalled check (one script per queue per interval)
 *   and its blocking fetch, which times out and blocks again every few seconds (not a lock cost);
 * - busy: messages held by handlers that sleep until the window ends, so every slot that can be
 *   busy holds a job whose lock BullMQ renews, one script per queue worker with held jobs per
 *   renewal: {@link CONCURRENCY} messages over the types in turn for the unordered shape, one per
 *   partition ({@link PARTITIONS}, keys picked so each lands on its own) for the ordered one, whose
 *   partition queues run one message at a time.
 *
 * For each (timings, state) on a fresh key prefix: the bus starts (and, busy, every handler has begun),
 * {@link SETTLE_MS} ms pass so start-up is not counted, then Redis's counters are read before and
 * after a window of {@link WINDOW_MS} ms: `INFO` `total_commands_processed` (commands run inside a
 * script count too, as Redis counts them), the `evalsha` calls of `INFO commandstats` (BullMQ's
 * scripts), and the server's CPU time (`used_cpu_user` + `used_cpu_sys`). The one `INFO` read of
 * the window is subtracted. The last column is the longest a SIGKILLed worker's message waits for
 * another worker with those timings, about lock + 2 stalled intervals (see docs/redis.md).
 *
 * Run: `npm run bench:redis-lock-cost` (it compiles src/ and bench/ with tsc into .bench/, then runs
 * `node .bench/bench/redis-lock-cost.js`). It starts a redis-server of its own (REDIS_URL to use
 * another: its counters are server-wide, so nothing else may use it meanwhile). BENCH_WINDOW_MS
 * changes the window (default 60000: two of the former stalled intervals).
 */
import 'reflect-metadata';
import { cpus, hostname } from 'node:os';
import { Redis } from 'ioredis';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type CommandDefinition,
  type HandlerClass,
} from '../src/index.js';
import { partitionOf, prepareMessage } from '../src/extend.js';
import { BullMqBroker, type BullMqBrokerOptions } from '../src/redis/index.js';
import { benchPrefix, deleteKeys, startBenchRedis, table } from './support.js';

const CONCURRENCY = 16;
/** BullMqBroker's default partition count: the most messages the ordered shape can hold at once. */
const PARTITIONS = 8;
const WINDOW_MS = Number(process.env.BENCH_WINDOW_MS ?? 60_000);
const SETTLE_MS = 3_000;
/** A busy worker that has not begun every handler by then has lost messages: fail loudly. */
const START_TIMEOUT_MS = 30_000;

if (!Number.isInteger(WINDOW_MS) || WINDOW_MS < 1_000) {
  throw new Error(
    `BENCH_WINDOW_MS must be a whole number of at least 1000, got "${process.env.BENCH_WINDOW_MS ?? ''}"`,
  );
}

/** Lock timings compared: the broker's options, and the figures they stand for. */
interface Timings {
  readonly label: string;
  readonly options: Partial<BullMqBrokerOptions>;
  readonly lockMs: number;
  readonly renewMs: number;
  readonly stalledMs: number;
}

const TIMINGS: readonly Timings[] = [
  {
    label: 'former defaults',
    options: { lockDurationMs: 30_000, stalledIntervalMs: 30_000 },
    lockMs: 30_000,
    renewMs: 15_000,
    stalledMs: 30_000,
  },
  { label: 'current defaults', options: {}, lockMs: 5_000, renewMs: 2_500, stalledMs: 2_500 },
];

type State = 'idle' | 'busy';

/** An endpoint: `types` command types, each with a handler, ordered (partition queues) or not. */
interface Shape {
  readonly types: number;
  readonly ordered: boolean;
}

const SHAPES: readonly Shape[] = [
  { types: 4, ordered: false },
  { types: 20, ordered: true },
];

interface Sample {
  /** Commands per second Redis ran (total_commands_processed, script-internal ones included). */
  readonly commands: number;
  /** EVALSHA calls per second (BullMQ's scripts). */
  readonly scripts: number;
  /** Redis server CPU time, in ms per second. */
  readonly cpuMs: number;
}

const schema = z.object({ n: z.number().int().nonnegative(), key: z.string() });

function definitionsOf(shape: Shape): CommandDefinition<string, typeof schema>[] {
  return Array.from({ length: shape.types }, (_, t) =>
    defineCommand(`bench.Lock${t}`, { schema, partitionKey: 'key', ordered: shape.ordered }),
  );
}

/** What the handlers wait on; released once a busy window is over. */
interface Hold {
  begun: number;
  onBegun: (() => void) | undefined;
  release: Promise<void>;
}

function handlersFor(definitions: readonly CommandDefinition[], hold: Hold): HandlerClass[] {
  return definitions.map((definition, t) => {
    @CommandHandler(definition, { name: `Lock${t}Handler` })
    class Handler {
      async handle(): Promise<void> {
        hold.begun++;
        hold.onBegun?.();
        await hold.release;
      }
    }
    return Handler;
  });
}

/** The counters of one `INFO all` reply. */
interface Counters {
  readonly commands: number;
  readonly evalsha: number;
  readonly cpuUs: number;
}

async function counters(admin: Redis): Promise<Counters> {
  const text = await admin.info('all');
  const field = (name: string): number => Number(new RegExp(`^${name}:(\\S+)`, 'm').exec(text)?.[1] ?? NaN);
  const evalsha = Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(text)?.[1] ?? 0);
  return {
    commands: field('total_commands_processed'),
    evalsha,
    cpuUs: (field('used_cpu_user') + field('used_cpu_sys')) * 1e6,
  };
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** How many messages a busy endpoint of `shape` holds at once. */
function busyCount(shape: Shape): number {
  return shape.ordered ? Math.min(PARTITIONS, CONCURRENCY) : CONCURRENCY;
}

/** `count` partition keys; for an ordered shape, each in a partition of its own. */
function busyKeys(shape: Shape, count: number): string[] {
  if (!shape.ordered) return Array.from({ length: count }, (_, n) => `k${n}`);
  const byPartition = new Map<number, string>();
  for (let n = 0; byPartition.size < count; n++) {
    const key = `k${n}`;
    const partition = partitionOf(key, PARTITIONS);
    if (!byPartition.has(partition)) byPartition.set(partition, key);
  }
  return [...byPartition.values()];
}

async function measure(
  url: string,
  admin: Redis,
  shape: Shape,
  timings: Timings,
  state: State,
): Promise<Sample & { readonly queues: number }> {
  const definitions = definitionsOf(shape);
  const prefix = benchPrefix('harrier-bench-lock');
  let release!: () => void;
  const hold: Hold = { begun: 0, onBegun: undefined, release: new Promise((resolve) => (release = resolve)) };
  const broker = new BullMqBroker({ connection: url, prefix, logger: silentLogger, ...timings.options });
  const bus = createBus({
    endpoint: 'bench',
    broker,
    handlers: handlersFor(definitions, hold),
    concurrency: CONCURRENCY,
    logger: silentLogger,
  });
  try {
    await bus.start();
    if (state === 'busy') {
      const now = Date.now();
      const held = busyCount(shape);
      const keys = busyKeys(shape, held);
      await broker.publishBatch(
        keys.map(
          // One message per type while there are enough.
          (key, n) =>
            prepareMessage(definitions[n % shape.types] as CommandDefinition, { n, key }, {}, { now })
              .outgoing,
        ),
      );
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(new Error(`Only ${hold.begun} of ${held} handlers began within ${START_TIMEOUT_MS} ms`));
        }, START_TIMEOUT_MS);
        hold.onBegun = () => {
          if (hold.begun < held) return;
          clearTimeout(timer);
          resolve();
        };
        hold.onBegun();
      });
    }
    await pause(SETTLE_MS);
    const before = await counters(admin);
    const started = Date.now();
    await pause(WINDOW_MS);
    const after = await counters(admin);
    const seconds = (Date.now() - started) / 1000;
    return {
      queues: broker.queuesOf('bench').length,
      // The INFO that read `before` is counted in `after`.
      commands: (after.commands - before.commands - 1) / seconds,
      scripts: (after.evalsha - before.evalsha) / seconds,
      cpuMs: (after.cpuUs - before.cpuUs) / 1000 / seconds,
    };
  } finally {
    release();
    await bus.stop();
    await deleteKeys(admin, prefix);
  }
}

async function main(): Promise<void> {
  const redis = await startBenchRedis();
  const admin = new Redis(redis.url);
  try {
    const version = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? '?';
    const cpu = cpus()[0]?.model ?? 'unknown CPU';
    console.log(
      `Harrier lock-cost benchmark — ${hostname()}, Node ${process.version} (${process.platform}/${process.arch}, ${cpu}, ${cpus().length} CPUs), Redis ${version}`,
    );
    console.log(
      `One worker process, concurrency ${CONCURRENCY}; busy = ${CONCURRENCY} handlers asleep for the whole window (${PARTITIONS} on the ordered endpoint, one per partition); window ${WINDOW_MS / 1000} s\n`,
    );
    const rows: string[][] = [];
    for (const shape of SHAPES) {
      for (const state of ['idle', 'busy'] as const) {
        for (const timings of TIMINGS) {
          const sample = await measure(redis.url, admin, shape, timings, state);
          rows.push([
            `${shape.types} types${shape.ordered ? ' ordered' : ''}, ${sample.queues} queues`,
            state,
            timings.label,
            `${timings.lockMs / 1000} / ${timings.renewMs / 1000} / ${timings.stalledMs / 1000}`,
            sample.commands.toFixed(2),
            sample.scripts.toFixed(2),
            sample.cpuMs.toFixed(2),
            `${(timings.lockMs + 2 * timings.stalledMs) / 1000}`,
          ]);
        }
      }
    }
    console.log(
      table(
        [
          'endpoint',
          'worker',
          'timings',
          'lock / renew / stalled s',
          'Redis cmd/s',
          'EVALSHA/s',
          'Redis CPU ms/s',
          'crash recovery <= s',
        ],
        rows,
      ),
    );
  } finally {
    admin.disconnect();
    redis.stop();
  }
}

await main();
