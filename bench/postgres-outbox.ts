/**
 * Throughput of the PostgreSQL outbox (write in the application's transaction + relay to a
 * BullMqBroker) beside the plain path it replaces (the application's transaction, then
 * `broker.publishBatch`), on the same PostgreSQL and Redis, in the same run.
 *
 * Each side handles N events in chunks of {@link CHUNK}, one chunk after another; each chunk is one
 * application transaction that inserts {@link CHUNK} order rows (one multi-row INSERT):
 *
 * - plain: `BEGIN`, INSERT the orders, `COMMIT`, then `broker.publishBatch` of the chunk's events
 *   (prepared by `bus.prepare`: zod validation, UUIDv7, envelope encoding). Timed until the last
 *   publishBatch resolves.
 * - outbox: `BEGIN`, INSERT the orders, `outbox.record` of the chunk's events (one INSERT into the
 *   outbox and a NOTIFY), `COMMIT`; one relay (default options: batches of 100, woken by NOTIFY)
 *   publishes them through `bus.publisher` to the same broker and removes the rows. Timed until the
 *   relay has published all N (the outbox is then empty).
 *
 * Both sides publish to a broker where one endpoint subscribes to the event, so every publish adds
 * a job. Rounds alternate plain / outbox ({@link ROUNDS} each, after an untimed warm-up of each),
 * every round with a fresh key prefix and a fresh orders table; the median is shown, with the ratio
 * outbox / plain.
 *
 * Run: `npm run bench:postgres-outbox` against DATABASE_URL (default
 * postgres://postgres@127.0.0.1:5432/postgres; a schema `harrier_bench_<random>` is created and
 * dropped) and REDIS_URL (default redis://127.0.0.1:6379). BENCH_N sets N (default 20000).
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import pg from 'pg';
import { z } from 'zod';
import { createBus, defineEvent, silentLogger, type MessageBus } from '../src/index.js';
import type { OutgoingMessage } from '../src/extend.js';
import { migratePostgres } from '../src/postgres/migrate-postgres.js';
import { startOutboxRelay } from '../src/postgres/outbox-relay.js';
import { PostgresOutbox } from '../src/postgres/postgres-outbox.js';
import { BullMqBroker } from '../src/redis/index.js';
import { benchPrefix, deleteKeys, fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const WARM_UP = Math.min(N, 2_000);
const CHUNK = 100;
const ROUNDS = 3;
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const RUN_TIMEOUT_MS = 180_000;

if (!Number.isInteger(N) || N < CHUNK) {
  throw new Error(`BENCH_N must be a whole number >= ${CHUNK}, got "${process.env.BENCH_N ?? ''}"`);
}

const OrderPlaced = defineEvent('bench.OrderPlaced', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
});

const schema = `harrier_bench_${randomBytes(4).toString('hex')}`;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
pool.on('error', () => {});

/** A bus on a fresh prefix whose broker has one subscription to the event. */
async function busOn(prefix: string): Promise<MessageBus> {
  const broker = new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
  await broker.register('sink', [{ handler: 'Sink', kind: 'event', types: [OrderPlaced.type] }]);
  return createBus({ endpoint: 'web', broker, logger: silentLogger });
}

function events(bus: MessageBus, round: number, from: number): OutgoingMessage[] {
  return Array.from({ length: CHUNK }, (_, i) =>
    bus.prepare(OrderPlaced, { orderId: `r${round}-${from + i}`, amount: 1 + i }),
  );
}

async function insertOrders(client: pg.PoolClient, round: number, from: number): Promise<void> {
  const ids = Array.from({ length: CHUNK }, (_, i) => `r${round}-${from + i}`);
  await client.query(`INSERT INTO "${schema}".orders (id, amount) SELECT unnest($1::text[]), 1`, [ids]);
}

/**
 * Runs one application transaction per chunk (INSERT orders, then `inTransaction`, then COMMIT),
 * then `afterCommit`; resolves to the time it started at.
 */
async function writeChunks(
  bus: MessageBus,
  round: number,
  n: number,
  step: {
    readonly inTransaction?: (client: pg.PoolClient, messages: OutgoingMessage[]) => Promise<void>;
    readonly afterCommit?: (messages: OutgoingMessage[]) => Promise<void>;
  },
): Promise<number> {
  const client = await pool.connect();
  try {
    const started = performance.now();
    for (let from = 0; from < n; from += CHUNK) {
      const messages = events(bus, round, from);
      await client.query('BEGIN');
      await insertOrders(client, round, from);
      await step.inTransaction?.(client, messages);
      await client.query('COMMIT');
      await step.afterCommit?.(messages);
    }
    return started;
  } finally {
    client.release();
  }
}

async function plain(bus: MessageBus, round: number, n: number): Promise<number> {
  const started = await writeChunks(bus, round, n, {
    afterCommit: (messages) => bus.broker.publishBatch(messages),
  });
  return n / ((performance.now() - started) / 1000);
}

async function viaOutbox(bus: MessageBus, round: number, n: number): Promise<number> {
  const outbox = new PostgresOutbox(bus, { schema });
  const relay = await startOutboxRelay({
    connection: pool,
    publisher: bus.publisher,
    schema,
    logger: silentLogger,
  });
  try {
    const started = await writeChunks(bus, round, n, {
      inTransaction: (client, messages) => outbox.record(client, messages),
    });
    const deadline = Date.now() + RUN_TIMEOUT_MS;
    while (relay.stats().published < n) {
      if (Date.now() > deadline) throw new Error(`The relay published ${relay.stats().published} of ${n}`);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    return n / ((performance.now() - started) / 1000);
  } finally {
    await relay.stop();
  }
}

async function round(side: 'plain' | 'outbox', index: number, n: number, redis: Redis): Promise<number> {
  const prefix = benchPrefix('harrier-bench-outbox');
  await pool.query(`TRUNCATE "${schema}".orders`);
  const bus = await busOn(prefix);
  try {
    return side === 'plain' ? await plain(bus, index, n) : await viaOutbox(bus, index, n);
  } finally {
    await bus.stop();
    await deleteKeys(redis, prefix);
  }
}

async function main(): Promise<void> {
  await migratePostgres(pool, { schema });
  await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY, amount integer NOT NULL)`);
  const redis = new Redis(REDIS_URL);
  const rates = { plain: [] as number[], outbox: [] as number[] };
  try {
    await round('plain', 0, WARM_UP, redis);
    await round('outbox', 0, WARM_UP, redis);
    for (let r = 1; r <= ROUNDS; r++) {
      // Alternating, and in the other order every other round, so drift in the host hits both.
      const order: ('plain' | 'outbox')[] = r % 2 === 1 ? ['plain', 'outbox'] : ['outbox', 'plain'];
      for (const side of order) rates[side].push(await round(side, r, N, redis));
    }
  } finally {
    redis.disconnect();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  }
  const plainRate = median(rates.plain);
  const outboxRate = median(rates.outbox);
  const fmt = (values: number[]): string => values.map(fmtRate).join(' / ');
  process.stdout.write(
    `PostgreSQL outbox vs plain INSERT + publishBatch: N = ${N}, chunks of ${CHUNK}, ${ROUNDS} rounds (median), Node ${process.version}, ${cpus().length} CPUs\n\n`,
  );
  process.stdout.write(
    `${table(
      ['path', 'msg/s (median)', 'rounds', 'vs plain'],
      [
        ['plain: INSERT + COMMIT, then publishBatch', fmtRate(plainRate), fmt(rates.plain), '1.00x'],
        [
          'outbox: INSERT + outbox rows + COMMIT, relay publishes',
          fmtRate(outboxRate),
          fmt(rates.outbox),
          `${(outboxRate / plainRate).toFixed(2)}x`,
        ],
      ],
    )}\n`,
  );
}

await main();
