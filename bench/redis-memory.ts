/**
 * Redis memory per message of Harrier on Redis, by structure: what one message leaves behind once it
 * has been handled (or dead-lettered), and for how long.
 *
 * Three runs, each on a fresh key prefix of the same length as the default `{harrier}` (key names
 * count: every byte of a key name is a byte of memory), with N messages each:
 *
 * - commands: N commands published with `broker.publishBatch` (as `bus.send` would, in chunks of
 *   {@link CHUNK}) and handled by one `@CommandHandler` on a bus over `BullMqBroker`.
 * - events: N events published with `bus.publish` on a bus with a `RedisEventLog` (every event is
 *   appended to the log, then fanned out), to two subscriptions on two endpoints: 2N deliveries.
 * - dead letters: N commands whose handler always throws, dead-lettered into a `RedisDeadLetterStore`
 *   after the default 5 attempts (10 to 50 ms apart), so each record and failed job carries five
 *   attempts with their stacks; BullMQ keeps each failed job (the default cap, 10,000 per queue).
 *
 * After each run the buses are stopped and every key under the prefix is measured with
 * `MEMORY USAGE <key> SAMPLES 0` (the key name, the value and its dictionary entry) and grouped by
 * structure: dedupe keys (`<queue>:de:<id>`), completed and failed jobs, dead-letter records
 * (`dlq:*`), event log (`log:*`: streams, the uid and id indexes), BullMQ's per-queue event stream,
 * the rest of BullMQ's per-queue keys, and Harrier's routes and registration (`harrier:*`). Beside
 * them, the growth of `INFO memory` `used_memory` over the run (taken with no client but this
 * script's connected, after a warm-up that loaded every Lua script), which also counts what `MEMORY
 * USAGE` does not see: the expiry entry of each dedupe key and the keyspace's hash-table slots.
 *
 * The dedupe key's cost at steady state is printed as the formula docs/redis.md gives:
 * bytes per dedupe key × deliveries per second × dedupe window, for BENCH_RATE messages per second
 * (default 1700) and the default window of 24 hours.
 *
 * Run: `npm run bench:redis-memory` (it compiles src/ and bench/ with tsc into .bench/, then runs
 * `node .bench/bench/redis-memory.js`). It starts a redis-server of its own on a free loopback port
 * (no persistence, in a temp dir) so the `INFO memory` figures see nothing else; set REDIS_URL to
 * measure on a server of yours instead (its other work then skews the `used_memory` column, not the
 * per-key ones). Set BENCH_N to change N (default 10000).
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  defineEvent,
  EventHandler,
  silentLogger,
  type HandlesCommand,
  type HandlesEvent,
  type MessageBus,
  type PayloadOf,
} from '../src/index.js';
import { prepareMessage, type OutgoingMessage } from '../src/extend.js';
import { BullMqBroker, describeRedisUrl, RedisDeadLetterStore, RedisEventLog } from '../src/redis/index.js';
import { startRedisServer, type LocalRedis } from '../test/helpers/local-redis.js';
import { Counter, benchPrefix, deleteKeys, fmtRate, infoField, keysOf, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 10_000);
const RATE = Number(process.env.BENCH_RATE ?? 1_700);
const CHUNK = 1_000;
/** Publishes in flight at once in the events run (`bus.publish` sends one message per call). */
const PUBLISH_CONCURRENCY = 64;
const CONCURRENCY = 16;
const WARM_UP = 300;
const RUN_TIMEOUT_MS = 300_000;
/** BullMQ's default `removeOnFail` cap, as Harrier sets it: a failed job beyond it is dropped. */
const DEFAULT_FAILED_CAP = 10_000;
const DEFAULT_WINDOW_S = 86_400;

if (!Number.isInteger(N) || N < 1) {
  throw new Error(`BENCH_N must be a positive whole number, got "${process.env.BENCH_N ?? ''}"`);
}
if (!(RATE > 0))
  throw new Error(`BENCH_RATE must be a positive number, got "${process.env.BENCH_RATE ?? ''}"`);

const PlaceOrder = defineCommand('orders.PlaceOrder', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
});
const ChargeCard = defineCommand('billing.ChargeCard', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
});
/** Topic `orders` (the type up to its last dot). */
const OrderPlaced = defineEvent('orders.OrderPlaced', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
  partitionKey: 'orderId',
});

const payloadOf = (i: number): { orderId: string; amount: number } => ({
  orderId: `order-${String(i).padStart(8, '0')}`,
  amount: 1 + (i % 100),
});

let handled: Counter | undefined;
let deadLettered: Counter | undefined;

@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(): void {
    handled?.hit();
  }
}

/** The default 5 attempts, so each dead letter carries a full attempt history; short delays between them. */
@CommandHandler(ChargeCard, { retry: { attempts: 5, backoff: { baseMs: 10, maxMs: 50, jitter: 0 } } })
class ChargeCardHandler implements HandlesCommand<typeof ChargeCard> {
  handle(payload: PayloadOf<typeof ChargeCard>): never {
    throw new Error(`Card declined for order ${payload.orderId}`);
  }
}

@EventHandler(OrderPlaced)
class ShipOrder implements HandlesEvent<typeof OrderPlaced> {
  handle(): void {
    handled?.hit();
  }
}

@EventHandler(OrderPlaced)
class NotifyCustomer implements HandlesEvent<typeof OrderPlaced> {
  handle(): void {
    handled?.hit();
  }
}

/** The structures a key belongs to, in the order the tables list them. */
const STRUCTURES = [
  'dedupe keys',
  'completed jobs',
  'failed jobs',
  'jobs not finished',
  'dead-letter records',
  'event log: streams',
  'event log: uid index',
  'event log: id index',
  'BullMQ event streams',
  'BullMQ queue keys',
  'routes & registration',
] as const;
type Structure = (typeof STRUCTURES)[number];

interface Usage {
  keys: number;
  bytes: number;
}

type Measured = Map<Structure, Usage>;

const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A prefix as long as the default `{harrier}`, so key names weigh what they do by default. */
const newPrefix = (): string => benchPrefix('hb', 2);

let admin: Redis;

/** `MEMORY USAGE ... SAMPLES 0` of every key under `prefix`, grouped by structure. */
async function measure(prefix: string): Promise<Measured> {
  const keys = await keysOf(admin, prefix);
  // Job hashes count as failed or completed jobs by the set that lists them.
  const finished = new Map<string, 'failed jobs' | 'completed jobs'>();
  for (const key of keys) {
    const kind = key.endsWith(':failed') ? 'failed jobs' : key.endsWith(':completed') ? 'completed jobs' : '';
    if (kind === '') continue;
    const queueKey = key.slice(0, key.lastIndexOf(':'));
    for (const id of await admin.zrange(key, '0', '-1')) finished.set(`${queueKey}:${id}`, kind);
  }
  const result: Measured = new Map(STRUCTURES.map((s) => [s, { keys: 0, bytes: 0 }]));
  for (let i = 0; i < keys.length; i += 500) {
    const batch = keys.slice(i, i + 500);
    const pipeline = admin.pipeline();
    for (const key of batch) pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0');
    const replies = (await pipeline.exec()) ?? [];
    batch.forEach((key, index) => {
      const [error, bytes] = replies[index] ?? [new Error('no reply'), null];
      if (error) throw error;
      const usage = result.get(structureOf(prefix, key, finished));
      if (usage === undefined) return;
      usage.keys++;
      usage.bytes += Number(bytes ?? 0);
    });
  }
  return result;
}

function structureOf(prefix: string, key: string, finished: ReadonlyMap<string, Structure>): Structure {
  const rest = key.slice(prefix.length + 1);
  if (rest.startsWith('harrier:')) return 'routes & registration';
  if (rest.startsWith('dlq:')) return 'dead-letter records';
  if (rest.startsWith('log:')) {
    if (rest === 'log:uids') return 'event log: uid index';
    if (rest === 'log:ids') return 'event log: id index';
    return 'event log: streams';
  }
  // A BullMQ key: <prefix>:<queue>:<name>, and queue names never hold ':'.
  const name = rest.slice(rest.indexOf(':') + 1);
  if (name.startsWith('de:')) return 'dedupe keys';
  if (name === 'failed') return 'failed jobs';
  if (name === 'completed') return 'completed jobs';
  if (name === 'events') return 'BullMQ event streams';
  if (JOB_ID.test(name)) return finished.get(key) ?? 'jobs not finished';
  return 'BullMQ queue keys';
}

async function info(field: string): Promise<number> {
  const value = await infoField(admin, field);
  if (Number.isNaN(value)) throw new Error(`INFO has no ${field}`);
  return value;
}

/** `used_memory` once every client but this script's has gone and lazy frees are done. */
async function settledMemory(): Promise<number> {
  const deadline = Date.now() + 30_000;
  while ((await info('connected_clients')) > 1 || (await info('lazyfree_pending_objects')) > 0) {
    if (Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return info('used_memory');
}

interface Run {
  readonly name: string;
  readonly messages: number;
  /** Queue deliveries: messages × subscriptions. */
  readonly deliveries: number;
  readonly measured: Measured;
  readonly usedMemoryDelta: number;
  readonly queues: number;
  readonly eventStreamEntries: number;
  readonly seconds: number;
}

/** Runs `body` on a fresh prefix, measures what it left, then deletes it. */
async function run(
  name: string,
  messages: number,
  deliveries: number,
  body: (prefix: string, url: string) => Promise<void>,
  url: string,
): Promise<Run> {
  const prefix = newPrefix();
  const began = performance.now();
  const before = await settledMemory();
  await body(prefix, url);
  const after = await settledMemory();
  const measured = await measure(prefix);
  const streams = (await keysOf(admin, prefix)).filter((k) => k.endsWith(':events'));
  let entries = 0;
  for (const key of streams) entries += await admin.xlen(key);
  await deleteKeys(admin, prefix);
  return {
    name,
    messages,
    deliveries,
    measured,
    usedMemoryDelta: after - before,
    queues: streams.length,
    eventStreamEntries: entries,
    seconds: (performance.now() - began) / 1000,
  };
}

function broker(prefix: string, url: string): BullMqBroker {
  return new BullMqBroker({ connection: url, prefix, logger: silentLogger });
}

async function commands(n: number, prefix: string, url: string): Promise<void> {
  handled = new Counter(RUN_TIMEOUT_MS);
  const b = broker(prefix, url);
  const bus = createBus({
    endpoint: 'orders',
    broker: b,
    handlers: [PlaceOrderHandler],
    concurrency: CONCURRENCY,
    logger: silentLogger,
  });
  try {
    // The route bus.start() registers: the commands are queued before the endpoint starts.
    await b.register('orders', [{ handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] }]);
    for (let from = 0; from < n; from += CHUNK) {
      const now = Date.now();
      const batch: OutgoingMessage[] = [];
      for (let i = from; i < Math.min(n, from + CHUNK); i++)
        batch.push(prepareMessage(PlaceOrder, payloadOf(i), {}, { now }).outgoing);
      await b.publishBatch(batch);
    }
    await bus.start();
    await handled.until(n);
  } finally {
    await bus.stop();
  }
}

async function events(n: number, prefix: string, url: string): Promise<void> {
  handled = new Counter(RUN_TIMEOUT_MS);
  const log = new RedisEventLog({ connection: url, prefix, topics: [{ name: 'orders', partitions: 4 }] });
  const buses: MessageBus[] = [
    createBus({
      endpoint: 'shipping',
      broker: broker(prefix, url),
      handlers: [ShipOrder],
      concurrency: CONCURRENCY,
      logger: silentLogger,
    }),
    createBus({
      endpoint: 'notifications',
      broker: broker(prefix, url),
      handlers: [NotifyCustomer],
      concurrency: CONCURRENCY,
      logger: silentLogger,
    }),
  ];
  const publisher = createBus({
    endpoint: 'web',
    broker: broker(prefix, url),
    definitions: [OrderPlaced],
    eventLog: log,
    logger: silentLogger,
  });
  try {
    for (const bus of buses) await bus.start();
    let next = 0;
    await Promise.all(
      Array.from({ length: PUBLISH_CONCURRENCY }, async () => {
        for (let i = next++; i < n; i = next++) await publisher.publish(OrderPlaced, payloadOf(i));
      }),
    );
    await handled.until(2 * n);
  } finally {
    for (const bus of [...buses, publisher]) await bus.stop();
    await log.close();
  }
}

async function deadLetters(n: number, prefix: string, url: string): Promise<void> {
  deadLettered = new Counter(RUN_TIMEOUT_MS);
  const b = broker(prefix, url);
  const store = new RedisDeadLetterStore({ connection: url, prefix });
  const counter = deadLettered;
  const bus = createBus({
    endpoint: 'billing',
    broker: b,
    deadLetters: store,
    handlers: [ChargeCardHandler],
    concurrency: CONCURRENCY,
    logger: silentLogger,
    hooks: {
      onDeadLettered: () => {
        counter.hit();
      },
    },
  });
  const queueKey = `${prefix}:cmd~${ChargeCard.type}`;
  try {
    // The route bus.start() registers: the commands are queued before the endpoint starts.
    await b.register('billing', [
      { handler: 'ChargeCardHandler', kind: 'command', types: [ChargeCard.type] },
    ]);
    for (let from = 0; from < n; from += CHUNK) {
      const now = Date.now();
      const batch: OutgoingMessage[] = [];
      for (let i = from; i < Math.min(n, from + CHUNK); i++)
        batch.push(prepareMessage(ChargeCard, payloadOf(i), {}, { now }).outgoing);
      await b.publishBatch(batch);
    }
    await bus.start();
    await counter.until(n);
    // The record is stored before the job fails: wait for BullMQ's failed set too.
    const deadline = Date.now() + RUN_TIMEOUT_MS;
    while ((await admin.zcard(`${queueKey}:failed`)) < Math.min(n, DEFAULT_FAILED_CAP)) {
      if (Date.now() > deadline) throw new Error('BullMQ never failed every dead-lettered job');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    await bus.stop();
    await store.close();
  }
}

/** A redis-server of the bench's own, or REDIS_URL. */
async function startRedis(): Promise<LocalRedis> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') return { url: fromEnv, stop: () => undefined };
  return startRedisServer('harrier-bench-redis-');
}

const fmtBytes = (n: number): string =>
  n >= 1e9
    ? `${(n / 1e9).toFixed(1)} GB`
    : n >= 1e6
      ? `${(n / 1e6).toFixed(1)} MB`
      : n >= 1e3
        ? `${(n / 1e3).toFixed(1)} kB`
        : `${Math.round(n)} B`;
const per = (bytes: number, n: number): string => (n > 0 ? (bytes / n).toFixed(0) : '-');

function printRun(r: Run): void {
  console.log(
    `\n${r.name}: ${fmtRate(r.messages)} messages, ${fmtRate(r.deliveries)} deliveries, ${r.queues} queue(s), ${r.seconds.toFixed(1)} s`,
  );
  const rows = STRUCTURES.map((s) => r.measured.get(s) ?? { keys: 0, bytes: 0 })
    .map((u, i) => ({ u, s: STRUCTURES[i] ?? '' }))
    .filter(({ u }) => u.keys > 0)
    .map(({ u, s }) => [
      s,
      fmtRate(u.keys),
      fmtRate(u.bytes),
      per(u.bytes, r.messages),
      per(u.bytes, r.deliveries),
    ]);
  const total = [...r.measured.values()].reduce((a, u) => a + u.bytes, 0);
  rows.push(['total (MEMORY USAGE)', '', fmtRate(total), per(total, r.messages), per(total, r.deliveries)]);
  rows.push([
    'used_memory growth',
    '',
    fmtRate(r.usedMemoryDelta),
    per(r.usedMemoryDelta, r.messages),
    per(r.usedMemoryDelta, r.deliveries),
  ]);
  console.log(table(['structure', 'keys', 'bytes', 'bytes/message', 'bytes/delivery'], rows));
}

async function main(): Promise<void> {
  const redis = await startRedis();
  admin = new Redis(redis.url, { maxRetriesPerRequest: 1, connectTimeout: 3_000 });
  try {
    const server = await admin.info('server');
    const version = /redis_version:(\S+)/.exec(server)?.[1] ?? 'unknown';
    console.log(
      `Harrier Redis memory benchmark — Node ${process.version}, Redis ${version} at ${describeRedisUrl(redis.url)}${process.env.REDIS_URL ? '' : ' (started by the bench)'}`,
    );
    const envelope = prepareMessage(PlaceOrder, payloadOf(0), {}, { now: Date.now() }).outgoing.body;
    console.log(
      `N = ${fmtRate(N)} messages per run after a ${WARM_UP}-message warm-up of each run; prefix length 9 (as '{harrier}'); envelopes of ${Buffer.byteLength(envelope)} bytes`,
    );

    // Loads BullMQ's and Harrier's Lua scripts and warms the keyspace, so the runs measure data only.
    await run('warm-up', WARM_UP, WARM_UP, (p, u) => commands(WARM_UP, p, u), redis.url);
    await run('warm-up', WARM_UP, 2 * WARM_UP, (p, u) => events(WARM_UP, p, u), redis.url);
    await run('warm-up', WARM_UP, WARM_UP, (p, u) => deadLetters(WARM_UP, p, u), redis.url);

    const cmd = await run('commands, handled', N, N, (p, u) => commands(N, p, u), redis.url);
    const evt = await run(
      'events, 2 subscriptions, with RedisEventLog',
      N,
      2 * N,
      (p, u) => events(N, p, u),
      redis.url,
    );
    const dead = await run(
      'commands, dead-lettered after 5 attempts (RedisDeadLetterStore)',
      N,
      N,
      (p, u) => deadLetters(N, p, u),
      redis.url,
    );
    for (const r of [cmd, evt, dead]) printRun(r);

    const bytes = (r: Run, s: Structure): number => r.measured.get(s)?.bytes ?? 0;
    const dedupe = bytes(cmd, 'dedupe keys') / N;
    // used_memory also sees each dedupe key's expiry entry and the keyspace's slots; the rest of
    // the run's keys are a handful of per-queue ones, counted by MEMORY USAGE alone.
    const others = [...cmd.measured]
      .filter(([s]) => s !== 'dedupe keys')
      .reduce((a, [, u]) => a + u.bytes, 0);
    const dedupeInMemory = (cmd.usedMemoryDelta - others) / N;
    const failed = bytes(dead, 'failed jobs') / Math.min(N, DEFAULT_FAILED_CAP);
    const record = bytes(dead, 'dead-letter records') / N;
    const logBytes =
      (bytes(evt, 'event log: streams') +
        bytes(evt, 'event log: id index') +
        bytes(evt, 'event log: uid index')) /
      N;
    const uidIndex = bytes(evt, 'event log: uid index') / N;
    const eventStream = bytes(cmd, 'BullMQ event streams');
    const routes = bytes(evt, 'routes & registration');

    console.log('\nPer message, by structure (what docs/redis.md uses):');
    console.log(
      table(
        ['structure', 'bytes', 'per', 'kept', 'bounded by'],
        [
          [
            'dedupe key (MEMORY USAGE)',
            dedupe.toFixed(0),
            'delivery',
            'dedupeWindowMs (24 h)',
            'rate x window',
          ],
          [
            'dedupe key (used_memory growth)',
            dedupeInMemory.toFixed(0),
            'delivery',
            'dedupeWindowMs (24 h)',
            'rate x window',
          ],
          ['completed job', '0', 'delivery', 'removed on completion', '-'],
          [
            'failed job',
            failed.toFixed(0),
            'dead letter',
            'failedRetentionMs (7 d)',
            'failedRetentionCount (10,000) per queue',
          ],
          ['dead-letter record', record.toFixed(0), 'dead letter', 'until purged', 'maxRecords (100,000)'],
          ['event log record (all 3 keys)', logBytes.toFixed(0), 'event', 'topic retentionMs', 'retention'],
          ['  of which uid index', uidIndex.toFixed(0), 'event', 'for ever', 'nothing'],
          [
            'BullMQ event stream',
            fmtRate(eventStream / Math.max(1, cmd.queues)),
            'queue',
            `~10,000 entries (${fmtRate(cmd.eventStreamEntries)} here)`,
            'queues',
          ],
          ['routes & registration', fmtRate(routes), 'system', 'for ever', 'types x subscriptions'],
        ],
      ),
    );
    const steady = dedupeInMemory * RATE * DEFAULT_WINDOW_S;
    console.log(
      `\nDedupe keys at steady state: ${dedupeInMemory.toFixed(0)} B x ${fmtRate(RATE)} deliveries/s x ${fmtRate(DEFAULT_WINDOW_S)} s (dedupeWindowMs 24 h) = ${fmtBytes(steady)}`,
    );
    console.log(
      `Failed jobs at the cap: ${failed.toFixed(0)} B x 10,000 = ${fmtBytes(failed * DEFAULT_FAILED_CAP)} per queue; dead-letter records at maxRecords: ${record.toFixed(0)} B x 100,000 = ${fmtBytes(record * 100_000)}`,
    );
  } finally {
    await admin.quit().catch(() => undefined);
    redis.stop();
  }
}

await main();
