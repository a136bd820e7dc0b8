/**
 * Saga steps in postgresUnitOfWork on a real PostgreSQL (DESIGN.md guarantees 9 and 10): with a
 * PostgresSagaStore on the unit's database and schema, a step's instance, the rows it writes through
 * postgresSession, its inbox row and its outgoing messages (outbox rows) commit in one transaction,
 * or none of them do; a store elsewhere is refused at start, a store of another kind runs apart.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  HarrierError,
  Handles,
  InMemorySagaStore,
  Saga,
  StartedBy,
  createBus,
  defineCommand,
  defineEvent,
  sagaStateOf,
  silentLogger,
  uuidv7,
  type MessageBus,
  type PayloadOf,
  type SagaContext,
  type SagaStore,
} from '../../src/index.js';
import { ManualClock } from '../../src/clock/manual-clock.js';
import {
  PostgresSagaStore,
  migratePostgres,
  postgresSession,
  postgresUnitOfWork,
  type PostgresUnitOfWork,
  type PostgresUnitOfWorkOptions,
} from '../../src/postgres/index.js';
import { createTestBus, type TestBus } from '../../src/testing/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import {
  ItemAdded as AddedToOrder,
  OrderSagaV1,
  OrderSagaV2,
  RAISED,
} from '../helpers/saga-state-versions.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const ItemAdded = defineEvent('pguow.ItemAdded', {
  schema: z.object({ order: z.string(), item: z.string() }),
});
const Orphan = defineEvent('pguow.Orphan', { schema: z.object({ order: z.string() }) });
const ShipItem = defineCommand('pguow.ShipItem', {
  schema: z.object({ order: z.string(), item: z.string() }),
});

const SAGA = 'pguow.Packing';
const PackingState = z.object({ items: z.number().default(0) });
type Packing = z.output<typeof PackingState>;

/** The schema of the test running now: Harrier's tables and the app's `packed`. */
let schema = '';
/** Attempts of the ItemAdded step, in order. */
let attempts: number[] = [];
/** The step throws after its writes on these attempts. */
let failOnAttempts = new Set<number>();
/** Awaited by the step before it writes (sees what earlier tries committed). */
let beforeWrite: ((ctx: SagaContext<Packing>) => Promise<void>) | undefined;
/** Awaited by the step after its writes, before it returns. */
let afterWrite: (() => Promise<void>) | undefined;

@Saga(SAGA, {
  state: PackingState,
  onMissing: 'dead-letter',
  retry: { attempts: 3, backoff: { baseMs: 10, jitter: 0 } },
})
class PackingSaga {
  @StartedBy(ItemAdded, { correlate: 'order' })
  async added(payload: PayloadOf<typeof ItemAdded>, ctx: SagaContext<Packing>): Promise<void> {
    attempts.push(ctx.attempt);
    await beforeWrite?.(ctx);
    const seen = ctx.state.items;
    await postgresSession(ctx).query(
      `INSERT INTO "${schema}".packed (order_id, item, message_id) VALUES ($1, $2, $3)`,
      [payload.order, payload.item, ctx.messageId],
    );
    ctx.send(ShipItem, payload);
    // Lets another step of the instance run meanwhile: the lock or the compare-and-set must hold.
    await new Promise((resolve) => setImmediate(resolve));
    ctx.setState({ items: seen + 1 });
    await afterWrite?.();
    if (failOnAttempts.has(ctx.attempt)) throw new Error(`attempt ${ctx.attempt} fails on purpose`);
  }

  @Handles(Orphan, { correlate: 'order' })
  orphan(_payload: PayloadOf<typeof Orphan>, ctx: SagaContext<Packing>): void {
    postgresSession(ctx);
  }
}

const units: PostgresUnitOfWork[] = [];
const buses: MessageBus[] = [];
const stores: SagaStore[] = [];

function unit(options: Partial<PostgresUnitOfWorkOptions> = {}): PostgresUnitOfWork {
  const made = postgresUnitOfWork({ connection: pool, schema, logger: silentLogger, ...options });
  units.push(made);
  return made;
}

function sagaStore(options: { schema?: string; connection?: string | pg.Pool } = {}): PostgresSagaStore {
  const store = new PostgresSagaStore({
    connection: options.connection ?? pool,
    schema: options.schema ?? schema,
  });
  stores.push(store);
  return store;
}

async function packingBus(unitOfWork: PostgresUnitOfWork, store: SagaStore): Promise<TestBus> {
  const bus = await createTestBus({
    clock: new ManualClock(),
    endpoint: 'packing',
    sagas: [PackingSaga],
    sagaStore: store,
    unitOfWork,
    requireCommandRoute: false,
  });
  buses.push(bus);
  await bus.start();
  return bus;
}

async function count(table: string): Promise<number> {
  const result = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".${table}`);
  return result.rows[0]?.n ?? 0;
}

/** Rows of the step's four kinds as another connection sees them now. */
async function visible(): Promise<{ sagas: number; packed: number; inbox: number; outbox: number }> {
  return {
    sagas: await count('sagas'),
    packed: await count('packed'),
    inbox: await count('inbox'),
    outbox: await count('outbox'),
  };
}

async function instance(
  store: SagaStore,
  order: string,
): Promise<{ version: number; items: number } | undefined> {
  const found = await store.get(SAGA, order);
  return found === undefined
    ? undefined
    : { version: found.version, items: sagaStateOf<Packing>(found).items };
}

beforeEach(async () => {
  schema = freshSchema();
  attempts = [];
  failOnAttempts = new Set();
  beforeWrite = undefined;
  afterWrite = undefined;
  await migratePostgres(pool, { schema });
  await pool.query(
    `CREATE TABLE "${schema}".packed (order_id text NOT NULL, item text NOT NULL, message_id text NOT NULL)`,
  );
});

afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.stop({ gracePeriodMs: 1_000 })));
  await Promise.all(stores.splice(0).map((s) => s.close()));
  await Promise.all(units.splice(0).map((u) => u.close()));
  await dropSchema(pool, schema);
});

describe('a saga step in postgresUnitOfWork with a PostgresSagaStore on its schema', () => {
  describe('when the step succeeds', () => {
    it('commits the state, its rows, the inbox row and the outbox row in one transaction, invisible until it commits', async () => {
      const store = sagaStore();
      const bus = await packingBus(unit(), store);
      let written = false;
      let release!: () => void;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      afterWrite = async () => {
        written = true;
        await gate;
      };
      await bus.publish(ItemAdded, { order: 'o-1', item: 'kettle' });
      const idle = bus.whenIdle();
      await waitFor('the step to have written', () => written, { timeoutMs: 10_000 });
      // Written, not committed: another connection sees none of it.
      expect(await visible()).toEqual({ sagas: 0, packed: 0, inbox: 0, outbox: 0 });
      release();
      await idle;
      expect(await visible()).toEqual({ sagas: 1, packed: 1, inbox: 1, outbox: 1 });
      expect(await instance(store, 'o-1')).toEqual({ version: 1, items: 1 });
      // One transaction id for all four rows.
      const xids = await pool.query<{ xid: string }>(
        `SELECT xmin::text AS xid FROM "${schema}".sagas UNION ALL SELECT xmin::text FROM "${schema}".packed
         UNION ALL SELECT xmin::text FROM "${schema}".inbox UNION ALL SELECT xmin::text FROM "${schema}".outbox`,
      );
      expect(xids.rows).toHaveLength(4);
      expect(new Set(xids.rows.map((r) => r.xid)).size).toBe(1);
      const outbox = await pool.query<{ type: string; kind: string }>(
        `SELECT type, kind FROM "${schema}".outbox`,
      );
      expect(outbox.rows).toEqual([{ type: 'pguow.ShipItem', kind: 'command' }]);
      // The outbox relay publishes it: the pipeline published nothing itself.
      expect(bus.messagesOf(ShipItem)).toEqual([]);
    });
  });

  describe('with outbox: false', () => {
    it('commits the state, its rows and the inbox row, then the pipeline publishes what the step sent', async () => {
      const store = sagaStore();
      const bus = await packingBus(unit({ outbox: false }), store);
      await bus.publish(ItemAdded, { order: 'o-9', item: 'tray' });
      await bus.whenIdle();
      expect(await visible()).toEqual({ sagas: 1, packed: 1, inbox: 1, outbox: 0 });
      expect(bus.messagesOf(ShipItem).map((m) => m.payload)).toEqual([{ order: 'o-9', item: 'tray' }]);
    });
  });

  describe('when the step throws after its writes', () => {
    it('commits none of them, and the retry applies them once', async () => {
      failOnAttempts = new Set([1]);
      const store = sagaStore();
      const bus = await packingBus(unit(), store);
      const seenByRetry: Awaited<ReturnType<typeof visible>>[] = [];
      beforeWrite = async (ctx) => {
        if (ctx.attempt === 2) {
          seenByRetry.push(await visible());
          expect(ctx.isNew).toBe(true);
        }
      };
      await bus.publish(ItemAdded, { order: 'o-2', item: 'teapot' }, { id: uuidv7() });
      await bus.whenIdle();
      expect(attempts).toEqual([1, 2]);
      // The retry found nothing of the failed try: no state, no row, no inbox row, no outbox row.
      expect(seenByRetry).toEqual([{ sagas: 0, packed: 0, inbox: 0, outbox: 0 }]);
      expect(await visible()).toEqual({ sagas: 1, packed: 1, inbox: 1, outbox: 1 });
      expect(await instance(store, 'o-2')).toEqual({ version: 1, items: 1 });
    });

    it('leaves nothing when it fails for good, and dead-letters the message', async () => {
      failOnAttempts = new Set([1, 2, 3]);
      const bus = await packingBus(unit(), sagaStore());
      await bus.publish(ItemAdded, { order: 'o-3', item: 'cup' });
      await bus.whenIdle();
      expect(attempts).toEqual([1, 2, 3]);
      expect(await visible()).toEqual({ sagas: 0, packed: 0, inbox: 0, outbox: 0 });
      expect(await bus.deadLetters.count()).toBe(1);
    });
  });

  describe('when the saga dead-letters a message it cannot take (onMissing)', () => {
    it('commits no inbox row, so a replay of the dead letter runs the step', async () => {
      const bus = await packingBus(unit(), sagaStore());
      await bus.publish(Orphan, { order: 'nobody' });
      await bus.whenIdle();
      expect(await bus.deadLetters.count()).toBe(1);
      expect(await visible()).toEqual({ sagas: 0, packed: 0, inbox: 0, outbox: 0 });
    });
  });

  describe('when the stored state is of another version than the saga', () => {
    async function orderBus(
      saga: typeof OrderSagaV1 | typeof OrderSagaV2,
      store: SagaStore,
    ): Promise<TestBus> {
      const bus = await createTestBus({
        clock,
        endpoint: 'orders',
        sagas: [saga],
        sagaStore: store,
        unitOfWork: unit(),
      });
      buses.push(bus);
      return bus;
    }

    /** The clock of the test's bus: a state's wait for newer code counts from its save by this clock. */
    let clock: ManualClock;
    beforeEach(() => {
      clock = new ManualClock();
    });

    /** Saves order o-1 outside any unit, as `stateVersion` says a saga of that version would. */
    async function saved(store: SagaStore, state: unknown, stateVersion?: number): Promise<void> {
      await store.save(
        {
          saga: 'sagaver.Order',
          id: 'o-1',
          state,
          ...(stateVersion === undefined ? {} : { stateVersion }),
          status: 'active',
          timeouts: [],
          now: clock.now(),
        },
        0,
      );
    }

    it('raises an older state in the transaction and commits it with the saga version and the inbox row', async () => {
      const store = sagaStore();
      await saved(store, { total: 5 });
      const bus = await orderBus(OrderSagaV2, store);
      await bus.publish(AddedToOrder, { orderId: 'o-1', amount: 3 });
      await bus.whenIdle();
      expect(await bus.deadLetters.count()).toBe(0);
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject(RAISED.afterV2);
      expect(await count('inbox')).toBe(1);
    });

    it('releases the message of a newer state, committing nothing, until it waited 24 hours', async () => {
      const store = sagaStore();
      await saved(store, { total: { amount: 5, currency: 'EUR' }, items: 1 }, 2);
      const bus = await orderBus(OrderSagaV1, store);
      await bus.publish(AddedToOrder, { orderId: 'o-1', amount: 3 });
      await bus.whenIdle({ includeDelayed: false });
      expect(await bus.deadLetters.count()).toBe(0);
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject({ stateVersion: 2, version: 1 });
      expect(await count('inbox')).toBe(0);
      // The virtual clock runs on through every release.
      await bus.whenIdle({ timeoutMs: 60_000 });
      const { records } = await bus.deadLetters.list();
      expect(records.map((r) => r.reason)).toEqual(['version-unsupported']);
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject({ stateVersion: 2, version: 1 });
      expect(await count('inbox')).toBe(0);
    });
  });

  describe('when a writer outside the unit saves the instance during the step', () => {
    it('rolls the whole try back, its row included, and runs the step again on the fresh state', async () => {
      const store = sagaStore();
      const outsider = sagaStore();
      const bus = await packingBus(unit(), store);
      let tries = 0;
      beforeWrite = async () => {
        tries += 1;
        if (tries > 1) return;
        // Created from another connection after the step read no instance, before it saves.
        await outsider.save(
          { saga: SAGA, id: 'o-10', state: { items: 10 }, status: 'active', timeouts: [], now: 1 },
          0,
        );
      };
      await bus.publish(ItemAdded, { order: 'o-10', item: 'bowl' });
      await bus.whenIdle();
      expect(tries).toBe(2);
      expect(attempts).toEqual([1, 1]);
      expect(await instance(store, 'o-10')).toEqual({ version: 2, items: 11 });
      expect(await visible()).toEqual({ sagas: 1, packed: 1, inbox: 1, outbox: 1 });
    });
  });

  describe('when the same message is delivered again after its step committed', () => {
    it('acks it without running the step: state, rows and messages once', async () => {
      const store = sagaStore();
      const u = unit();
      const bus = await packingBus(u, store);
      const id = uuidv7();
      await bus.publish(ItemAdded, { order: 'o-4', item: 'jug' }, { id });
      await bus.whenIdle();
      // A second process delivers the same message id again (its own broker, no dedupe).
      const again = await packingBus(u, store);
      await again.publish(ItemAdded, { order: 'o-4', item: 'jug' }, { id });
      await again.whenIdle();
      expect(attempts).toEqual([1]);
      expect(await visible()).toEqual({ sagas: 1, packed: 1, inbox: 1, outbox: 1 });
      expect(await instance(store, 'o-4')).toEqual({ version: 1, items: 1 });
    });
  });

  describe('when two processes run steps of one instance at once', () => {
    it('loses no update: 60 concurrent steps make 60, each with its row and message', async () => {
      const first = sagaStore({ connection: databaseUrl });
      const second = sagaStore({ connection: databaseUrl });
      const bus = await createTestBus({
        clock: new ManualClock(),
        endpoint: 'packing',
        sagas: [PackingSaga],
        sagaStore: first,
        unitOfWork: unit(),
        requireCommandRoute: false,
        concurrency: 16,
      });
      buses.push(bus);
      await bus.start();
      const other = createBus({
        broker: bus.broker,
        clock: bus.clock,
        endpoint: 'packing',
        sagas: [PackingSaga],
        sagaStore: second,
        unitOfWork: unit({ connection: databaseUrl }),
        requireCommandRoute: false,
        concurrency: 16,
        logger: silentLogger,
      });
      await other.start();
      try {
        await Promise.all(
          Array.from({ length: 60 }, (_, i) => bus.publish(ItemAdded, { order: 'o-5', item: `i${i}` })),
        );
        await bus.whenIdle({ timeoutMs: 30_000 });
      } finally {
        await other.stop({ closeBroker: false });
      }
      expect(await instance(first, 'o-5')).toEqual({ version: 60, items: 60 });
      expect(await visible()).toEqual({ sagas: 1, packed: 60, inbox: 60, outbox: 60 });
    });
  });
});

describe('a saga step with postgresUnitOfWork and a saga store elsewhere', () => {
  it('runs apart from the unit with a saga store of another kind (in memory): no session, no inbox row', async () => {
    const store = new InMemorySagaStore();
    const bus = await packingBus(unit(), store);
    await bus.publish(ItemAdded, { order: 'o-6', item: 'lid' });
    await bus.whenIdle();
    // postgresSession throws no-transaction: the step fails to its dead letter, as before the unit.
    expect(await bus.deadLetters.count()).toBe(1);
    const [letter] = (await bus.deadLetters.list()).records;
    expect(letter?.error.code).toBe('no-transaction');
    expect(await visible()).toEqual({ sagas: 0, packed: 0, inbox: 0, outbox: 0 });
  });

  it("runs apart from the unit when the unit's kinds leave 'saga' out", async () => {
    const bus = await packingBus(unit({ kinds: ['command', 'event', 'projection'] }), sagaStore());
    await bus.publish(ItemAdded, { order: 'o-7', item: 'lid' });
    await bus.whenIdle();
    expect(await bus.deadLetters.count()).toBe(1);
    expect(await count('sagas')).toBe(0);
  });

  it('refuses to start with a PostgresSagaStore on another schema, naming the fix', async () => {
    const elsewhere = freshSchema();
    await migratePostgres(pool, { schema: elsewhere });
    try {
      const error = await packingBus(unit(), sagaStore({ schema: elsewhere })).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      expect((error as Error).message).toMatch(/same connection and schema/);
      expect((error as Error).message).toContain(elsewhere);
    } finally {
      await dropSchema(pool, elsewhere);
    }
  });

  it('refuses to start with a PostgresSagaStore on another database, naming the fix', async () => {
    const database = `t_${randomBytes(6).toString('hex')}`;
    await pool.query(`CREATE DATABASE ${database}`);
    const url = new URL(databaseUrl);
    url.pathname = `/${database}`;
    const other = new pg.Pool({ connectionString: url.toString(), max: 2 });
    try {
      await migratePostgres(other, { schema });
      const error = await packingBus(unit(), sagaStore({ connection: other })).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      expect((error as Error).message).toMatch(/different databases.*same connection and schema/);
    } finally {
      await Promise.all(stores.splice(0).map((s) => s.close()));
      await other.end();
      await pool.query(`DROP DATABASE ${database}`);
    }
  });

  it('joins a PostgresSagaStore given its own pool (a URL) on the same database', async () => {
    const store = sagaStore({ connection: databaseUrl });
    const bus = await packingBus(unit(), store);
    await bus.publish(ItemAdded, { order: 'o-8', item: 'pan' });
    await bus.whenIdle();
    expect(await visible()).toEqual({ sagas: 1, packed: 1, inbox: 1, outbox: 1 });
  });
});
