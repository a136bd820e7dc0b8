import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  HarrierError,
  Handles,
  ManualClock,
  Saga,
  StartedBy,
  createBus,
  defineEvent,
  sagaStateOf,
  silentLogger,
  type MessageBus,
  type PayloadOf,
  type SagaContext,
  type SagaWrite,
} from '../../src/index.js';
// Through the entry point (harrier/postgres), as an application imports it.
import { PostgresSagaStore, migratePostgres } from '../../src/postgres/index.js';
import { createTestBus, type TestBus } from '../../src/testing/index.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { RAISED, runVersion1ThenVersion2 } from '../helpers/saga-state-versions.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const schema = freshSchema();

beforeAll(async () => {
  await migratePostgres(pool, { schema });
});
afterAll(async () => {
  await dropSchema(pool, schema);
});

const OrderPlaced = defineEvent('pgsaga.OrderPlaced', { schema: z.object({ orderId: z.string() }) });
const PaymentCaptured = defineEvent('pgsaga.PaymentCaptured', { schema: z.object({ orderId: z.string() }) });
const PaymentDue = defineEvent('pgsaga.PaymentDue', { schema: z.object({ orderId: z.string() }) });
const OrderReady = defineEvent('pgsaga.OrderReady', { schema: z.object({ orderId: z.string() }) });
const OrderCancelled = defineEvent('pgsaga.OrderCancelled', { schema: z.object({ orderId: z.string() }) });
const Counted = defineEvent('pgsaga.Counted', { schema: z.object({ counter: z.string() }) });

const FulfilmentState = z.object({
  placed: z.boolean().default(false),
  paid: z.boolean().default(false),
});
type Fulfilment = z.output<typeof FulfilmentState>;

@Saga('pgsaga.Fulfilment', { state: FulfilmentState })
class FulfilmentSaga {
  @StartedBy(OrderPlaced, { correlate: 'orderId' })
  placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<Fulfilment>): void {
    ctx.state.placed = true;
    ctx.requestTimeout(PaymentDue, 60_000, { orderId: payload.orderId });
  }

  @Handles(PaymentCaptured, { correlate: 'orderId' })
  paid(payload: PayloadOf<typeof PaymentCaptured>, ctx: SagaContext<Fulfilment>): void {
    ctx.state.paid = true;
    ctx.publish(OrderReady, { orderId: payload.orderId });
    ctx.complete();
  }

  @Handles(PaymentDue)
  due(payload: PayloadOf<typeof PaymentDue>, ctx: SagaContext<Fulfilment>): void {
    ctx.publish(OrderCancelled, { orderId: payload.orderId });
    ctx.complete();
  }
}

const CounterState = z.object({ count: z.number().default(0) });

@Saga('pgsaga.Counter', { state: CounterState })
class CounterSaga {
  @StartedBy(Counted, { correlate: 'counter' })
  async count(_payload: PayloadOf<typeof Counted>, ctx: SagaContext<{ count: number }>): Promise<void> {
    const seen = ctx.state.count;
    // Lets another process's step of the instance run meanwhile: the compare-and-set must notice.
    await new Promise((resolve) => setImmediate(resolve));
    ctx.setState({ count: seen + 1 });
  }
}

/** Counts the saves PostgreSQL refused because another process saved first. */
class CountingStore extends PostgresSagaStore {
  conflicts = 0;
  override async save(write: SagaWrite, expectedVersion: number) {
    try {
      return await super.save(write, expectedVersion);
    } catch (error) {
      if (HarrierError.is(error, 'saga-conflict')) this.conflicts += 1;
      throw error;
    }
  }
}

describe('Saga on PostgresSagaStore', () => {
  let clock: ManualClock;
  let bus: TestBus | undefined;
  let other: MessageBus | undefined;

  afterEach(async () => {
    // Stopping a bus closes its saga store.
    await other?.stop({ closeBroker: false });
    await bus?.stop();
    bus = undefined;
    other = undefined;
  });

  function store(): CountingStore {
    return new CountingStore({ connection: databaseUrl, schema, clock });
  }

  /** A test bus (FIFO delivery) running the fulfilment saga, and its store. */
  async function fulfilmentBus(): Promise<{ bus: TestBus; sagas: CountingStore }> {
    clock = new ManualClock();
    const sagas = store();
    bus = await createTestBus({ clock, sagas: [FulfilmentSaga], sagaStore: sagas, deliveryOrder: 'fifo' });
    return { bus, sagas };
  }

  describe('when started by one event and completed by another', () => {
    it('keeps the instance in PostgreSQL, completes it once and drops its timeout', async () => {
      const { bus, sagas } = await fulfilmentBus();
      await bus.publish(OrderPlaced, { orderId: 'o-1' });
      await bus.whenIdle({ includeDelayed: false });
      const started = await sagas.get('pgsaga.Fulfilment', 'o-1');
      expect(started).toMatchObject({ status: 'active', version: 1 });
      expect(started?.timeouts).toHaveLength(1);

      await bus.publish(PaymentCaptured, { orderId: 'o-1' });
      await bus.whenIdle();
      const done = await sagas.get('pgsaga.Fulfilment', 'o-1');
      expect(done).toMatchObject({ status: 'completed', version: 2, timeouts: [] });
      expect(sagaStateOf<Fulfilment>(done!)).toEqual({ placed: true, paid: true });
      expect(bus.messagesOf(OrderReady).map((m) => m.payload)).toEqual([{ orderId: 'o-1' }]);
      expect(bus.messagesOf(OrderCancelled)).toEqual([]);
      const row = await pool.query<{ status: string }>(
        `SELECT status FROM "${schema}".sagas WHERE saga = 'pgsaga.Fulfilment' AND id = 'o-1'`,
      );
      expect(row.rows).toEqual([{ status: 'completed' }]);
    });
  });

  describe('when its timeout fires first', () => {
    it('runs the timeout step on the stored state and completes the instance', async () => {
      const { bus, sagas } = await fulfilmentBus();
      await bus.publish(OrderPlaced, { orderId: 'o-2' });
      // Runs the delayed PaymentDue by moving the virtual clock forward.
      await bus.whenIdle();
      expect(bus.messagesOf(OrderCancelled).map((m) => m.payload)).toEqual([{ orderId: 'o-2' }]);
      expect(await sagas.get('pgsaga.Fulfilment', 'o-2')).toMatchObject({ status: 'completed', version: 2 });
    });
  });

  describe('when two processes run steps of one instance at once', () => {
    it('loses no update: 100 concurrent increments make 100, after conflicts were retried', async () => {
      clock = new ManualClock();
      const first = store();
      const second = store();
      bus = await createTestBus({ clock, sagas: [CounterSaga], sagaStore: first, concurrency: 16 });
      // A second process of the same endpoint: the same broker, its own store, pool and lock.
      other = createBus({
        broker: bus.broker,
        clock: bus.clock,
        sagas: [CounterSaga],
        sagaStore: second,
        concurrency: 16,
        logger: silentLogger,
      });
      await other.start();
      await Promise.all(Array.from({ length: 100 }, () => bus!.publish(Counted, { counter: 'c-1' })));
      await bus.whenIdle({ timeoutMs: 30_000 });
      const instance = await first.get('pgsaga.Counter', 'c-1');
      expect(sagaStateOf<{ count: number }>(instance!).count).toBe(100);
      expect(instance?.version).toBe(100);
      expect(first.conflicts + second.conflicts).toBeGreaterThan(0);
    });
  });

  describe('a saga whose state changed shape', () => {
    it('raises a state saved by version 1 of the saga with the upcaster of version 2, which runs its step on it', async () => {
      clock = new ManualClock();
      const sagas = store();
      try {
        const run = await runVersion1ThenVersion2(sagas, 'o-1');
        expect(run.afterV1).toMatchObject(RAISED.afterV1);
        expect(run.afterV2).toMatchObject(RAISED.afterV2);
        expect(run.deadLetters).toBe(0);
        const row = await pool.query<{ state_version: number }>(
          `SELECT state_version FROM "${schema}".sagas WHERE saga = 'sagaver.Order' AND id = 'o-1'`,
        );
        expect(row.rows).toEqual([{ state_version: 2 }]);
      } finally {
        await sagas.close();
      }
    });
  });
});
