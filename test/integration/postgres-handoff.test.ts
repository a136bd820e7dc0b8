/**
 * postgresUnitOfWork({ broker }) on a real PostgreSQL: what a handler records is inserted into the
 * PostgresBroker's queue in the handler's own transaction, routed, deduplicated, delayed and fanned
 * out as the broker's publish does, and `bus.start()` refuses a hand-off that could not work.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  HarrierError,
  InMemoryBroker,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type BusOptions,
  type DeadLetteredEvent,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { InMemoryEventLog } from '../../src/log/index.js';
import { PostgresBroker } from '../../src/postgres/broker/postgres-broker.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { postgresSession } from '../../src/postgres/postgres-session.js';
import { postgresUnitOfWork, type PostgresUnitOfWork } from '../../src/postgres/postgres-unit-of-work.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const PlaceOrder = defineCommand('hand.PlaceOrder', {
  schema: z.object({
    orderId: z.string(),
    shipInMs: z.number().optional(),
    eventId: z.string().optional(),
    unrouted: z.boolean().optional(),
  }),
});
const ShipOrder = defineCommand('hand.ShipOrder', { schema: z.object({ orderId: z.string() }) });
const Unrouted = defineCommand('hand.Unrouted', { schema: z.object({ orderId: z.string() }) });
const OrderPlaced = defineEvent('hand.OrderPlaced', { schema: z.object({ orderId: z.string() }) });

/** The schema of the running test. */
let schema = '';

@CommandHandler(PlaceOrder, { retry: { attempts: 1 } })
class PlaceOrderHandler {
  async handle(order: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): Promise<void> {
    await postgresSession(ctx).query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [order.orderId]);
    ctx.send(
      ShipOrder,
      { orderId: order.orderId },
      order.shipInMs !== undefined ? { delayMs: order.shipInMs } : {},
    );
    ctx.publish(
      OrderPlaced,
      { orderId: order.orderId },
      order.eventId !== undefined ? { id: order.eventId } : {},
    );
    if (order.unrouted === true) ctx.send(Unrouted, { orderId: order.orderId });
  }
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function broker(connection: string = databaseUrl, inSchema: string = schema): PostgresBroker {
  const made = new PostgresBroker({ connection, schema: inSchema, pollIntervalMs: 20, logger: silentLogger });
  cleanups.push(() => made.close());
  return made;
}

function unit(given: PostgresBroker): PostgresUnitOfWork {
  const made = postgresUnitOfWork({ connection: pool, schema, broker: given, logger: silentLogger });
  cleanups.push(() => made.close());
  return made;
}

function bus(options: BusOptions): MessageBus {
  const made = createBus({ handlers: [PlaceOrderHandler], logger: silentLogger, ...options });
  cleanups.push(() => made.stop({ gracePeriodMs: 200, closeBroker: false }));
  return made;
}

/** A fresh schema with the `orders` table, and the queues of a `shipping` endpoint that is not running. */
async function environment(): Promise<void> {
  schema = freshSchema();
  await migratePostgres(pool, { schema });
  await pool.query(`CREATE TABLE "${schema}".orders (id text NOT NULL)`);
  const current = schema;
  cleanups.push(() => dropSchema(pool, current));
  // Registered, never received: the copies the hand-off inserts stay in the queue to be looked at.
  await broker().register('shipping', [
    { handler: 'ShipOrderHandler', kind: 'command', types: [ShipOrder.type] },
    { handler: 'Billing', kind: 'event', types: [OrderPlaced.type] },
    { handler: 'Analytics', kind: 'event', types: [OrderPlaced.type] },
  ]);
}

interface QueueRow {
  readonly queue: string;
  readonly type: string;
  readonly message_id: string;
  readonly run_at: string;
  readonly created_at: string;
  readonly xmin: string;
}

async function copies(): Promise<QueueRow[]> {
  const { rows } = await pool.query<QueueRow>(
    `SELECT queue, type, message_id, run_at::text, created_at::text, xmin::text FROM "${schema}".queue
      WHERE type <> $1 ORDER BY queue, seq`,
    [PlaceOrder.type],
  );
  return rows;
}

async function inboxRows(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".inbox`);
  return rows[0]?.n ?? -1;
}

/** An `orders` bus on a PostgresBroker with the hand-off, started. */
async function ordersBus(options: Partial<BusOptions> = {}): Promise<MessageBus> {
  const shared = broker();
  const orders = bus({ endpoint: 'orders', broker: shared, unitOfWork: unit(shared), ...options });
  await orders.start();
  return orders;
}

describe('postgresUnitOfWork with broker (the hand-off)', () => {
  describe('when a handler sends a command and publishes an event', () => {
    it("inserts one copy per route into the broker's queue, in the transaction of the handler's row and its inbox row", async () => {
      await environment();
      const orders = await ordersBus();
      await orders.send(PlaceOrder, { orderId: 'o-1' });
      await waitFor('the handler to commit', async () => (await inboxRows()) === 1, { timeoutMs: 10_000 });

      const rows = await copies();
      expect(rows.map((row) => [row.queue, row.type])).toEqual([
        ['cmd~hand.ShipOrder', ShipOrder.type],
        ['evt~shipping~Analytics', OrderPlaced.type],
        ['evt~shipping~Billing', OrderPlaced.type],
      ]);
      const order = await pool.query<{ xmin: string }>(`SELECT xmin::text FROM "${schema}".orders`);
      const inbox = await pool.query<{ xmin: string }>(`SELECT xmin::text FROM "${schema}".inbox`);
      const xmins = new Set([...rows.map((row) => row.xmin), order.rows[0]?.xmin, inbox.rows[0]?.xmin]);
      expect(xmins.size).toBe(1);
      const outbox = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".outbox`);
      expect(outbox.rows[0]?.n).toBe(0);
    });
  });

  describe('when the handler delays its command', () => {
    it("stores the copy with the broker's due time, and nothing takes it before", async () => {
      await environment();
      const orders = await ordersBus();
      await orders.send(PlaceOrder, { orderId: 'o-1', shipInMs: 60_000 });
      await waitFor('the handler to commit', async () => (await inboxRows()) === 1, { timeoutMs: 10_000 });
      const ship = (await copies()).find((row) => row.type === ShipOrder.type);
      expect(ship).toBeDefined();
      expect(Number(ship?.run_at) - Number(ship?.created_at)).toBeGreaterThanOrEqual(59_000);
    });
  });

  describe('when two handlers publish an event with the same id', () => {
    it("keeps one copy per subscription: the broker's dedupe", async () => {
      await environment();
      const orders = await ordersBus();
      const eventId = '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
      await orders.send(PlaceOrder, { orderId: 'o-1', eventId });
      await orders.send(PlaceOrder, { orderId: 'o-2', eventId });
      await waitFor('both handlers to commit', async () => (await inboxRows()) === 2, { timeoutMs: 10_000 });
      const events = (await copies()).filter((row) => row.type === OrderPlaced.type);
      expect(events.map((row) => [row.queue, row.message_id])).toEqual([
        ['evt~shipping~Analytics', eventId],
        ['evt~shipping~Billing', eventId],
      ]);
    });
  });

  describe('when the handler sends a command no endpoint registered', () => {
    it('fails the attempt with no-route and commits nothing of it', async () => {
      await environment();
      const dead: DeadLetteredEvent[] = [];
      await ordersBus({ hooks: { onDeadLettered: (event) => dead.push(event) } });
      const sender = bus({ endpoint: 'web', broker: broker(), handlers: [] });
      await sender.send(PlaceOrder, { orderId: 'o-1', unrouted: true });
      await waitFor('the dead letter', () => dead.length === 1, { timeoutMs: 10_000 });
      expect(dead[0]?.record.error.code).toBe('no-route');
      expect(await inboxRows()).toBe(0);
      const order = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".orders`);
      expect(order.rows[0]?.n).toBe(0);
      expect(await copies()).toEqual([]);
    });

    it("queues it when the bus's requireCommandRoute is false, as the bus's publish would", async () => {
      await environment();
      await ordersBus({ requireCommandRoute: false });
      const sender = bus({ endpoint: 'web', broker: broker(), handlers: [] });
      await sender.send(PlaceOrder, { orderId: 'o-1', unrouted: true });
      await waitFor('the handler to commit', async () => (await inboxRows()) === 1, { timeoutMs: 10_000 });
      expect((await copies()).map((row) => row.type)).toContain(Unrouted.type);
    });
  });

  describe('bus.start()', () => {
    it("refuses a bus whose broker is not the unit's", async () => {
      await environment();
      const orders = bus({ endpoint: 'orders', broker: new InMemoryBroker(), unitOfWork: unit(broker()) });
      const started = orders.start();
      await expect(started).rejects.toSatisfy((error) => HarrierError.is(error, 'invalid-option'));
      await expect(started).rejects.toThrow(/same PostgresBroker instance/);
    });

    it('refuses a bus with an event log', async () => {
      await environment();
      const shared = broker();
      const orders = bus({
        endpoint: 'orders',
        broker: shared,
        unitOfWork: unit(shared),
        eventLog: new InMemoryEventLog({ topics: [{ name: 'hand', partitions: 1 }] }),
      });
      const started = orders.start();
      await expect(started).rejects.toSatisfy((error) => HarrierError.is(error, 'invalid-option'));
      await expect(started).rejects.toThrow(/remove eventLog from the bus/);
    });

    it("refuses a broker on another database than the unit's", async () => {
      await environment();
      const database = `handoff_${randomBytes(4).toString('hex')}`;
      await pool.query(`CREATE DATABASE ${database}`);
      cleanups.push(async () => {
        await pool.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      });
      const url = new URL(databaseUrl);
      url.pathname = `/${database}`;
      // Nothing to migrate there: the check asks each pool which database it reaches, before any use.
      const elsewhere = broker(url.toString());
      const orders = bus({ endpoint: 'orders', broker: elsewhere, unitOfWork: unit(elsewhere) });
      const started = orders.start();
      await expect(started).rejects.toSatisfy((error) => HarrierError.is(error, 'invalid-option'));
      await expect(started).rejects.toThrow(new RegExp(`its broker's reaches "${database}"`));
    });
  });

  describe('postgresUnitOfWork', () => {
    it('refuses a broker that is not a PostgresBroker', () => {
      expect(() =>
        postgresUnitOfWork({
          connection: pool,
          broker: new InMemoryBroker() as unknown as PostgresBroker,
        }),
      ).toThrow(/broker must be a PostgresBroker/);
    });

    it('refuses broker with outbox: false', async () => {
      await environment();
      expect(() => postgresUnitOfWork({ connection: pool, broker: broker(), outbox: false })).toThrow(
        /broker and outbox: false contradict each other/,
      );
    });
  });
});
