/**
 * The exactly-once hand-off under SIGKILL: a worker (test/e2e/fixtures/pg-handoff-worker.ts, a child
 * process) runs its PlaceOrder handler in postgresUnitOfWork with `broker`, so the handler's order
 * row, its inbox row and the copies of the ShipOrder command and the OrderPlaced event it records
 * commit in one transaction on the PostgresBroker's database. The worker is killed with SIGKILL at
 * the COMMIT of that transaction, before it or right after it (before the ack), and restarted. The
 * receiving `shipping` endpoint runs here, without an inbox, and counts every delivery.
 */
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  CommandHandler,
  EventHandler,
  createBus,
  silentLogger,
  type MessageBus,
  type PayloadOf,
} from '../../src/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { WorkerProcesses, type Worker } from '../helpers/worker-processes.js';
import { OrderPlaced, PlaceOrder, ShipOrder, handoffBroker } from './fixtures/pg-handoff-messages.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const workers = new WorkerProcesses(
  fileURLToPath(new URL('./fixtures/pg-handoff-worker.ts', import.meta.url)),
);
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  await workers.killAll();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type KillMode = 'before-commit' | 'after-commit' | 'none';

/** Starts the worker fixture on `schema`, killing itself at a COMMIT as `kill` says. */
function startWorker(schema: string, kill: KillMode): Worker {
  return workers.launch({ DATABASE_URL: databaseUrl, SCHEMA: schema, KILL: kill });
}

/** A fresh schema, migrated, with the worker's `orders` table, and the test's `shipping` endpoint. */
async function environment() {
  const schema = freshSchema();
  await migratePostgres(pool, { schema });
  // No key: a row written twice shows as two rows.
  await pool.query(`CREATE TABLE "${schema}".orders (id text NOT NULL)`);
  const shipped = new Map<string, number>();
  const announced = new Map<string, number>();
  const count = (counts: Map<string, number>, id: string): void => {
    counts.set(id, (counts.get(id) ?? 0) + 1);
  };
  @CommandHandler(ShipOrder)
  class ShipOrderHandler {
    handle(order: PayloadOf<typeof ShipOrder>) {
      count(shipped, order.orderId);
    }
  }
  @EventHandler(OrderPlaced)
  class OrderPlacedHandler {
    handle(event: PayloadOf<typeof OrderPlaced>) {
      count(announced, event.orderId);
    }
  }
  const shipping: MessageBus = createBus({
    endpoint: 'shipping',
    broker: handoffBroker(databaseUrl, schema),
    handlers: [ShipOrderHandler, OrderPlacedHandler],
    logger: silentLogger,
  });
  await shipping.start();
  cleanups.push(async () => {
    await shipping.stop({ gracePeriodMs: 200 });
    await dropSchema(pool, schema);
  });
  return { schema, shipping, shipped, announced };
}

async function countOf(sql: string): Promise<number> {
  const result = await pool.query<{ n: number }>(sql);
  return result.rows[0]?.n ?? -1;
}

/** Waits for a worker's `{"ready":true}`: its bus receives, and `orders` has its routes. */
async function ready(worker: Worker): Promise<void> {
  await waitFor('the worker to start', () => worker.output().includes('"ready":true'), {
    timeoutMs: 20_000,
    explain: () => worker.output(),
  });
}

/** Runs a worker that must die by its own SIGKILL at a COMMIT. */
async function killedRun(schema: string, kill: KillMode): Promise<void> {
  const worker = startWorker(schema, kill);
  await worker.exited();
  expect(worker.child.signalCode, worker.output()).toBe('SIGKILL');
}

/**
 * Runs a worker that kills nothing until every message is settled (the queue is empty), then checks
 * what exactly-once means: each order row once, each sent message delivered once, no outbox row
 * ever written.
 */
async function finishAndCheck(
  env: Awaited<ReturnType<typeof environment>>,
  orderIds: readonly string[],
): Promise<void> {
  const { schema, shipped, announced } = env;
  const worker = startWorker(schema, 'none');
  await ready(worker);
  await waitFor(
    'every order shipped and announced, and an empty queue',
    async () =>
      shipped.size === orderIds.length &&
      announced.size === orderIds.length &&
      (await countOf(`SELECT count(*)::int AS n FROM "${schema}".queue`)) === 0,
    {
      timeoutMs: 30_000,
      explain: () =>
        `shipped ${JSON.stringify([...shipped])}, announced ${JSON.stringify([...announced])}; worker: ${worker.output()}`,
    },
  );
  const rows = await pool.query<{ id: string; n: number }>(
    `SELECT id, count(*)::int AS n FROM "${schema}".orders GROUP BY id ORDER BY id`,
  );
  const once = [...orderIds].sort().map((id) => ({ id, n: 1 }));
  expect(rows.rows).toEqual(once);
  const onceEach = new Map(orderIds.map((id) => [id, 1]));
  expect(new Map([...shipped].sort())).toEqual(new Map([...onceEach].sort()));
  expect(new Map([...announced].sort())).toEqual(new Map([...onceEach].sort()));
  // The outbox was never used: no row, and its identity never handed out a value.
  expect(await countOf(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toBe(0);
  expect(
    await countOf(
      `SELECT count(*)::int AS n FROM pg_sequences WHERE schemaname = '${schema}' AND sequencename LIKE 'outbox%' AND last_value IS NOT NULL`,
    ),
  ).toBe(0);
  // Every order ran its handler once in a committed transaction: one inbox row each.
  expect(await countOf(`SELECT count(*)::int AS n FROM "${schema}".inbox`)).toBe(orderIds.length);
}

describe('PostgreSQL hand-off under SIGKILL', () => {
  describe("when the worker is killed before its commit, after the handler's writes", () => {
    it('commits each order once and delivers its command and event once, with no outbox row and no relay', async () => {
      const env = await environment();
      const orderIds = ['o-1', 'o-2', 'o-3'];
      // The first worker registers the `orders` routes; it dies at the COMMIT of the first order.
      const first = startWorker(env.schema, 'before-commit');
      await ready(first);
      for (const orderId of orderIds) await env.shipping.send(PlaceOrder, { orderId });
      await first.exited();
      expect(first.child.signalCode, first.output()).toBe('SIGKILL');
      // Two more workers die the same way (each takes a message after the last one's lease ends).
      await killedRun(env.schema, 'before-commit');
      await killedRun(env.schema, 'before-commit');
      // Nothing of the killed transactions stayed: no order row, no copy queued for shipping.
      expect(await countOf(`SELECT count(*)::int AS n FROM "${env.schema}".orders`)).toBe(0);
      expect(
        await countOf(`SELECT count(*)::int AS n FROM "${env.schema}".queue WHERE type <> 'hof.PlaceOrder'`),
      ).toBe(0);
      expect(env.shipped.size + env.announced.size).toBe(0);
      await finishAndCheck(env, orderIds);
    }, 120_000);
  });

  describe('when the worker is killed right after its commit, before the ack', () => {
    it('commits each order once and delivers its command and event once, with no outbox row and no relay', async () => {
      const env = await environment();
      const orderIds = ['o-1', 'o-2', 'o-3'];
      const first = startWorker(env.schema, 'after-commit');
      await ready(first);
      for (const orderId of orderIds) await env.shipping.send(PlaceOrder, { orderId });
      await first.exited();
      expect(first.child.signalCode, first.output()).toBe('SIGKILL');
      // Each killed worker commits one more order (a redelivery of a committed one is skipped by
      // the inbox, which rolls back rather than commits), then dies before acking it.
      for (let i = 1; i < orderIds.length; i++) await killedRun(env.schema, 'after-commit');
      expect(await countOf(`SELECT count(*)::int AS n FROM "${env.schema}".orders`)).toBe(orderIds.length);
      // Every PlaceOrder is still queued: each was committed and never acked.
      expect(
        await countOf(`SELECT count(*)::int AS n FROM "${env.schema}".queue WHERE type = 'hof.PlaceOrder'`),
      ).toBe(orderIds.length);
      await finishAndCheck(env, orderIds);
    }, 120_000);
  });
});
