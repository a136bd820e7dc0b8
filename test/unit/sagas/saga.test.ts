import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  EventHandler,
  Handles,
  HarrierError,
  InMemorySagaStore,
  ManualClock,
  Saga,
  SAGA_APPLIED_MAX_BYTES,
  SagaConflictError,
  StartedBy,
  createBus,
  defineCommand,
  sagaStateOf,
  defineEvent,
  silentLogger,
  uuidv7,
  type MessageBus,
  type PayloadOf,
  type SagaContext,
  type SagaMissingRule,
  type SagaWrite,
} from '../../../src/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';

const OrderPlaced = defineEvent('sagas.OrderPlaced', { schema: z.object({ orderId: z.string() }) });
const PaymentCaptured = defineEvent('sagas.PaymentCaptured', {
  schema: z.object({ reference: z.string() }),
});
const OrderReady = defineEvent('sagas.OrderReady', { schema: z.object({ orderId: z.string() }) });
const OrderCancelled = defineEvent('sagas.OrderCancelled', { schema: z.object({ orderId: z.string() }) });
const PaymentDue = defineEvent('sagas.PaymentDue', { schema: z.object({ orderId: z.string() }) });
const Counted = defineEvent('sagas.Counted', { schema: z.object({ counter: z.string() }) });
const StockRequested = defineEvent('sagas.StockRequested', { schema: z.object({ orderId: z.string() }) });

const FulfilmentState = z.object({
  orderId: z.string().optional(),
  placed: z.boolean().default(false),
  paid: z.boolean().default(false),
  reminders: z.number().default(0),
});
type Fulfilment = z.output<typeof FulfilmentState>;

/** Payment references look like `pay:<orderId>`: the correlation function takes the order id out. */
const byReference = (payload: PayloadOf<typeof PaymentCaptured>): string =>
  payload.reference.slice('pay:'.length);

function readyWhenBoth(ctx: SagaContext<Fulfilment>): void {
  if (ctx.state.placed && ctx.state.paid) {
    ctx.publish(OrderReady, { orderId: ctx.sagaId });
    ctx.complete();
  }
}

/** A fulfilment saga started by either event, completed once both arrived. */
function fulfilmentSaga(rules: { onMissing?: SagaMissingRule; onCompleted?: SagaMissingRule } = {}) {
  @Saga('sagas.Fulfilment', { state: FulfilmentState, ...rules })
  class FulfilmentSaga {
    @StartedBy(OrderPlaced, { correlate: 'orderId' })
    placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<Fulfilment>): void {
      ctx.state.orderId = payload.orderId;
      ctx.state.placed = true;
      ctx.requestTimeout(PaymentDue, 60_000, { orderId: payload.orderId });
      readyWhenBoth(ctx);
    }

    @StartedBy(PaymentCaptured, { correlate: byReference })
    paid(_payload: PayloadOf<typeof PaymentCaptured>, ctx: SagaContext<Fulfilment>): void {
      ctx.state.paid = true;
      readyWhenBoth(ctx);
    }

    @Handles(PaymentDue)
    due(payload: PayloadOf<typeof PaymentDue>, ctx: SagaContext<Fulfilment>): void {
      ctx.publish(OrderCancelled, { orderId: payload.orderId });
      ctx.complete();
    }
  }
  return FulfilmentSaga;
}

/** Only payments for orders it knows: started by OrderPlaced alone. */
function paymentOnlySaga(rules: { onMissing?: SagaMissingRule; onCompleted?: SagaMissingRule }) {
  @Saga('sagas.PaymentOnly', { state: FulfilmentState, ...rules })
  class PaymentOnly {
    @StartedBy(OrderPlaced, { correlate: 'orderId' })
    placed(_payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<Fulfilment>): void {
      ctx.state.placed = true;
    }

    @Handles(PaymentCaptured, { correlate: byReference })
    paid(_payload: PayloadOf<typeof PaymentCaptured>, ctx: SagaContext<Fulfilment>): void {
      ctx.state.paid = true;
      ctx.complete();
    }
  }
  return PaymentOnly;
}

const CounterState = z.object({ count: z.number().default(0) });

@Saga('sagas.Counter', { state: CounterState })
class CounterSaga {
  @StartedBy(Counted, { correlate: 'counter' })
  async count(_payload: PayloadOf<typeof Counted>, ctx: SagaContext<{ count: number }>): Promise<void> {
    const seen = ctx.state.count;
    // Another step of the instance may run meanwhile (in another process): the CAS must notice.
    await new Promise((resolve) => setImmediate(resolve));
    ctx.setState({ count: seen + 1 });
  }
}

/** Counts the orders it saw and requests stock for each. */
@Saga('sagas.Stock', { state: CounterState })
class StockSaga {
  @StartedBy(OrderPlaced, { correlate: 'orderId' })
  placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<{ count: number }>): void {
    ctx.state.count += 1;
    ctx.publish(StockRequested, { orderId: payload.orderId });
  }
}

/**
 * Makes the test bus's broker fail the first `times` publishes of StockRequested: each runs
 * `before(publish)` (which may publish it for real), then throws. Returns how many failed.
 */
function failStockPublish(
  bus: TestBus,
  times: number,
  before: (publish: () => Promise<void>) => Promise<void>,
): () => number {
  const broker = bus.broker;
  const publish = broker.publish.bind(broker);
  let failures = 0;
  vi.spyOn(broker, 'publish').mockImplementation(async (message) => {
    if (message.type === StockRequested.type && failures < times) {
      failures += 1;
      await before(() => publish(message));
      throw new Error('broker connection lost');
    }
    await publish(message);
  });
  return () => failures;
}

/** A test bus (FIFO delivery) running the fulfilment saga on `store`. */
function fulfilmentBus(store: InMemorySagaStore): Promise<TestBus> {
  return createTestBus({ clock, sagas: [fulfilmentSaga()], sagaStore: store, deliveryOrder: 'fifo' });
}

/** Counts conflicts: saves refused because another step saved first. */
class CountingStore extends InMemorySagaStore {
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

/** One virtual clock per test for the bus and its store (a completed instance expires on the store's clock). */
let clock: ManualClock;
beforeEach(() => {
  clock = new ManualClock();
});

describe('Saga', () => {
  let bus: TestBus | undefined;
  let other: MessageBus | undefined;
  afterEach(async () => {
    await other?.stop({ closeBroker: false });
    await bus?.stop();
    bus = undefined;
    other = undefined;
  });

  describe('when started by one event and completed by another', () => {
    it.each([
      ['OrderPlaced first', true],
      ['PaymentCaptured first', false],
    ])('completes once both arrived (%s), correlated by field and by function', async (_name, orderFirst) => {
      const store = new InMemorySagaStore({ clock });
      bus = await fulfilmentBus(store);
      const first = orderFirst
        ? () => bus!.publish(OrderPlaced, { orderId: 'o-1' })
        : () => bus!.publish(PaymentCaptured, { reference: 'pay:o-1' });
      const second = orderFirst
        ? () => bus!.publish(PaymentCaptured, { reference: 'pay:o-1' })
        : () => bus!.publish(OrderPlaced, { orderId: 'o-1' });
      await first();
      await bus.whenIdle({ includeDelayed: false });
      expect((await store.get('sagas.Fulfilment', 'o-1'))?.status).toBe('active');
      await second();
      await bus.whenIdle();
      const instance = await store.get('sagas.Fulfilment', 'o-1');
      expect(instance).toMatchObject({ status: 'completed', version: 2, timeouts: [] });
      expect(sagaStateOf<Fulfilment>(instance!)).toMatchObject({ placed: true, paid: true });
      expect(bus.messagesOf(OrderReady).map((m) => m.payload)).toEqual([{ orderId: 'o-1' }]);
      // The timeout the first step requested was dropped by the completion.
      expect(bus.messagesOf(OrderCancelled)).toEqual([]);
    });

    it('completes every instance when both events of 20 orders arrive at once, in shuffled order', async () => {
      const store = new InMemorySagaStore({ clock });
      bus = await createTestBus({ clock, sagas: [fulfilmentSaga()], sagaStore: store });
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => [
          bus!.publish(OrderPlaced, { orderId: `o-${i}` }),
          bus!.publish(PaymentCaptured, { reference: `pay:o-${i}` }),
        ]).flat(),
      );
      await bus.whenIdle();
      expect(bus.messagesOf(OrderReady)).toHaveLength(20);
      for (let i = 0; i < 20; i++) {
        expect((await store.get('sagas.Fulfilment', `o-${i}`))?.status).toBe('completed');
      }
    });
  });

  describe('consistency', () => {
    it('saves the state before it publishes, and a redelivery publishes the same ids once downstream', async () => {
      const store = new InMemorySagaStore({ clock });
      const handled: string[] = [];
      @EventHandler(StockRequested)
      class Warehouse {
        handle(payload: PayloadOf<typeof StockRequested>): void {
          handled.push(payload.orderId);
        }
      }
      const savedAtFailure: (number | undefined)[] = [];
      bus = await createTestBus({
        clock,
        handlers: [Warehouse],
        sagas: [StockSaga],
        sagaStore: store,
        retry: { attempts: 5 },
      });
      // The broker takes the message, then the connection drops before the step settles: the step
      // fails after its message went out.
      failStockPublish(bus, 1, async (publish) => {
        savedAtFailure.push((await store.get('sagas.Stock', 'o-1'))?.version);
        await publish();
      });
      await bus.publish(OrderPlaced, { orderId: 'o-1' });
      await bus.whenIdle();
      expect(savedAtFailure).toEqual([1]);
      const instance = await store.get('sagas.Stock', 'o-1');
      expect(instance?.version).toBe(1);
      expect(sagaStateOf<{ count: number }>(instance!).count).toBe(1);
      const ids = bus.messagesOf(StockRequested).map((m) => m.id);
      expect(ids).toHaveLength(2);
      expect(new Set(ids).size).toBe(1);
      expect(handled).toEqual(['o-1']);
    });

    it('keeps the state saved when the publish fails before anything went out, then publishes once', async () => {
      const store = new InMemorySagaStore({ clock });
      bus = await createTestBus({
        clock,
        sagas: [StockSaga],
        sagaStore: store,
        definitions: [StockRequested],
      });
      const failures = failStockPublish(bus, 2, () => Promise.resolve());
      await bus.publish(OrderPlaced, { orderId: 'o-1' });
      await bus.whenIdle();
      expect(failures()).toBe(2);
      const instance = await store.get('sagas.Stock', 'o-1');
      expect(instance?.version).toBe(1);
      expect(sagaStateOf<{ count: number }>(instance!).count).toBe(1);
      expect(bus.messagesOf(StockRequested)).toHaveLength(1);
    });

    it('derives outgoing ids from the saga, the saga id, the message and the position', async () => {
      const store = new InMemorySagaStore({ clock });
      bus = await fulfilmentBus(store);
      const placedId = await bus.publish(OrderPlaced, { orderId: 'o-1' });
      await bus.whenIdle({ includeDelayed: false });
      // Replaying the step's message to a fresh store gives the same timeout id.
      const first = (await store.get('sagas.Fulfilment', 'o-1'))?.timeouts[0]?.id;
      const again = new InMemorySagaStore({ clock });
      const second = await createTestBus({ clock, sagas: [fulfilmentSaga()], sagaStore: again });
      try {
        await second.publish(OrderPlaced, { orderId: 'o-1' }, { id: placedId });
        await second.whenIdle({ includeDelayed: false });
        expect((await again.get('sagas.Fulfilment', 'o-1'))?.timeouts[0]?.id).toBe(first);
      } finally {
        await second.stop();
      }
    });

    it('serialises the steps of one instance in a process: 200 concurrent increments make 200, no conflict', async () => {
      const store = new CountingStore({ clock });
      bus = await createTestBus({ clock, sagas: [CounterSaga], sagaStore: store, concurrency: 16 });
      await Promise.all(Array.from({ length: 200 }, () => bus!.publish(Counted, { counter: 'c-1' })));
      await bus.whenIdle();
      const instance = await store.get('sagas.Counter', 'c-1');
      expect(sagaStateOf<{ count: number }>(instance!).count).toBe(200);
      expect(instance?.version).toBe(200);
      expect(store.conflicts).toBe(0);
    });

    it('retries a step that lost the compare-and-set on fresh state: two processes, 200 increments make 200', async () => {
      const store = new CountingStore({ clock });
      bus = await createTestBus({ clock, sagas: [CounterSaga], sagaStore: store, concurrency: 16 });
      // A second process of the same endpoint: same broker and store, its own lock.
      other = createBus({
        broker: bus.broker,
        clock: bus.clock,
        sagas: [CounterSaga],
        sagaStore: store,
        concurrency: 16,
        logger: silentLogger,
      });
      await other.start();
      await Promise.all(Array.from({ length: 200 }, () => bus!.publish(Counted, { counter: 'c-1' })));
      await bus.whenIdle();
      const instance = await store.get('sagas.Counter', 'c-1');
      expect(sagaStateOf<{ count: number }>(instance!).count).toBe(200);
      expect(instance?.version).toBe(200);
      expect(store.conflicts).toBeGreaterThan(0);
    });
  });

  describe('applied steps (redelivery bookkeeping)', () => {
    /** Counts its runs per saga instance and requests stock each time; remembers `keepApplied` steps. */
    function countingStockSaga(keepApplied?: number, keepAppliedMs?: number) {
      const runs: string[] = [];
      @Saga('sagas.CountingStock', {
        state: CounterState,
        ...(keepApplied !== undefined ? { keepApplied } : {}),
        ...(keepAppliedMs !== undefined ? { keepAppliedMs } : {}),
      })
      class CountingStock {
        @StartedBy(OrderPlaced, { correlate: 'orderId' })
        placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<{ count: number }>): void {
          runs.push(ctx.messageId);
          ctx.state.count += 1;
          ctx.publish(StockRequested, { orderId: payload.orderId });
        }
      }
      return { saga: CountingStock, runs };
    }

    it('keeps them beside the state: a redelivery of a saved step republishes its ids and does not run it again', async () => {
      const store = new InMemorySagaStore({ clock });
      const { saga, runs } = countingStockSaga();
      bus = await createTestBus({ clock, sagas: [saga], sagaStore: store, definitions: [StockRequested] });
      // The message goes out, then the step fails: its delivery is retried.
      failStockPublish(bus, 1, (publish) => publish());
      const savedAt = clock.now();
      const placed = await bus.publish(OrderPlaced, { orderId: 'o-1' });
      await bus.whenIdle();

      const sent = bus.messagesOf(StockRequested).map((m) => m.id);
      expect(sent).toHaveLength(2);
      expect(new Set(sent).size).toBe(1);
      expect(runs).toEqual([placed]);
      const instance = await store.get('sagas.CountingStock', 'o-1');
      expect(instance?.state).toEqual({ count: 1 });
      expect(instance?.applied).toEqual([
        {
          message: placed,
          outgoing: [expect.objectContaining({ id: sent[0], type: StockRequested.type })],
          at: savedAt,
        },
      ]);
    });

    it.each([
      ['keepApplied: 2, keepAppliedMs: 1', 2, 1, 2, 4],
      ['keepApplied: 2, the default keepAppliedMs of an hour', 2, undefined, 3, 3],
      ['the default of 64', undefined, 1, 3, 3],
    ])(
      'runs a message redelivered after 2 later steps again only when it was forgotten (%s)',
      async (_name, keepApplied, keepAppliedMs, remembered, count) => {
        const store = new InMemorySagaStore({ clock });
        const { saga, runs } = countingStockSaga(keepApplied, keepAppliedMs);
        bus = await createTestBus({
          clock,
          sagas: [saga],
          sagaStore: store,
          definitions: [StockRequested],
          deliveryOrder: 'fifo',
          retry: { immediate: 0 },
        });
        // The first step's publish fails before anything went out: its retry waits for the backoff.
        failStockPublish(bus, 1, () => Promise.resolve());
        const first = await bus.publish(OrderPlaced, { orderId: 'o-1' });
        await bus.whenIdle({ includeDelayed: false });
        // Older than a 1 ms keepAppliedMs, well before the retry is due.
        clock.advance(2);
        await bus.publish(OrderPlaced, { orderId: 'o-1' });
        await bus.publish(OrderPlaced, { orderId: 'o-1' });
        await bus.whenIdle({ includeDelayed: false });
        const before = await store.get('sagas.CountingStock', 'o-1');
        expect(before?.applied).toHaveLength(remembered);
        expect(before?.applied.some((a) => a.message === first)).toBe(remembered === 3);

        await bus.whenIdle();
        expect(runs.filter((id) => id === first)).toHaveLength(count - 2);
        const after = await store.get('sagas.CountingStock', 'o-1');
        expect(after?.state).toEqual({ count });
        expect(after?.applied).toHaveLength(remembered);
        // Outgoing ids derive from the message, so even the re-run step's message goes out once.
        expect(bus.messagesOf(StockRequested)).toHaveLength(3);
      },
    );
    it('forgets the oldest steps, even young ones, beyond 1 MiB of applied JSON, with a warning', async () => {
      const store = new InMemorySagaStore({ clock });
      const warnings: string[] = [];
      @Saga('sagas.BigStock', { state: CounterState })
      class BigStock {
        @StartedBy(Counted, { correlate: 'counter' })
        count(_payload: PayloadOf<typeof Counted>, ctx: SagaContext<{ count: number }>): void {
          ctx.state.count += 1;
          // About 300 KB per step: three fit in 1 MiB, not four.
          ctx.publish(StockRequested, { orderId: 'x'.repeat(300_000) });
        }
      }
      bus = await createTestBus({
        clock,
        sagas: [BigStock],
        sagaStore: store,
        definitions: [StockRequested],
        deliveryOrder: 'fifo',
        logger: { ...silentLogger, warn: (message) => warnings.push(message) },
      });
      const ids: string[] = [];
      for (let i = 0; i < 6; i++) ids.push(await bus.publish(Counted, { counter: 'c-1' }));
      await bus.whenIdle();
      const instance = await store.get('sagas.BigStock', 'c-1');
      expect(instance?.state).toEqual({ count: 6 });
      expect(instance?.applied.map((a) => a.message)).toEqual(ids.slice(-3));
      expect(Buffer.byteLength(JSON.stringify(instance?.applied))).toBeLessThanOrEqual(
        SAGA_APPLIED_MAX_BYTES,
      );
      expect(warnings.some((w) => /forgot its 1 oldest applied steps/.test(w))).toBe(true);
    });

    describe('a step whose publish failed, redelivered after keepApplied later steps', () => {
      const StockState = z.object({ paid: z.boolean().default(false) });

      it('publishes the messages of a fired timeout that later steps pushed out of keepApplied', async () => {
        const store = new InMemorySagaStore({ clock });
        @Saga('sagas.DueStock', { state: StockState, keepApplied: 1 })
        class DueStock {
          @StartedBy(OrderPlaced, { correlate: 'orderId' })
          placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<{ paid: boolean }>): void {
            ctx.requestTimeout(PaymentDue, 0, { orderId: payload.orderId });
          }

          @Handles(PaymentDue)
          due(payload: PayloadOf<typeof PaymentDue>, ctx: SagaContext<{ paid: boolean }>): void {
            ctx.publish(StockRequested, { orderId: payload.orderId });
          }

          @Handles(PaymentCaptured, { correlate: byReference })
          paid(_payload: PayloadOf<typeof PaymentCaptured>, ctx: SagaContext<{ paid: boolean }>): void {
            ctx.state.paid = true;
          }
        }
        bus = await createTestBus({
          clock,
          sagas: [DueStock],
          sagaStore: store,
          definitions: [StockRequested],
          deliveryOrder: 'fifo',
        });
        // The timeout's step saves (the timeout leaves the pending list), then its publish fails.
        const failures = failStockPublish(bus, 1, () => Promise.resolve());
        await bus.publish(OrderPlaced, { orderId: 'o-1' });
        await bus.whenIdle({ includeDelayed: false });
        expect(failures()).toBe(1);
        await bus.publish(PaymentCaptured, { reference: 'pay:o-1' });
        await bus.whenIdle();
        expect(bus.messagesOf(StockRequested).map((m) => m.payload)).toEqual([{ orderId: 'o-1' }]);
        const instance = await store.get('sagas.DueStock', 'o-1');
        expect(instance).toMatchObject({ state: { paid: true }, timeouts: [] });
      });

      it('publishes the messages of a step whose instance later steps completed', async () => {
        const store = new InMemorySagaStore({ clock });
        @Saga('sagas.CompletedStock', { state: StockState, keepApplied: 1, onCompleted: 'dead-letter' })
        class CompletedStock {
          @StartedBy(OrderPlaced, { correlate: 'orderId' })
          placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<{ paid: boolean }>): void {
            ctx.publish(StockRequested, { orderId: payload.orderId });
          }

          @Handles(PaymentCaptured, { correlate: byReference })
          paid(_payload: PayloadOf<typeof PaymentCaptured>, ctx: SagaContext<{ paid: boolean }>): void {
            ctx.state.paid = true;
          }

          @Handles(OrderReady, { correlate: 'orderId' })
          ready(_payload: PayloadOf<typeof OrderReady>, ctx: SagaContext<{ paid: boolean }>): void {
            ctx.complete();
          }
        }
        bus = await createTestBus({
          clock,
          sagas: [CompletedStock],
          sagaStore: store,
          definitions: [StockRequested],
          deliveryOrder: 'fifo',
        });
        failStockPublish(bus, 1, () => Promise.resolve());
        await bus.publish(OrderPlaced, { orderId: 'o-1' });
        await bus.whenIdle({ includeDelayed: false });
        await bus.publish(PaymentCaptured, { reference: 'pay:o-1' });
        await bus.publish(OrderReady, { orderId: 'o-1' });
        await bus.whenIdle({ includeDelayed: false });
        expect((await store.get('sagas.CompletedStock', 'o-1'))?.status).toBe('completed');
        await bus.whenIdle();
        expect(bus.messagesOf(StockRequested)).toHaveLength(1);
        expect(await bus.deadLetters.count()).toBe(0);
      });
    });
  });

  describe('loading a stored instance', () => {
    const SeenState = z.object({ count: z.number().default(0), seen: z.array(z.string()).default([]) });

    @Saga('sagas.Seen', { state: SeenState })
    class SeenSaga {
      @StartedBy(Counted, { correlate: 'counter' })
      count(_payload: PayloadOf<typeof Counted>, ctx: SagaContext<z.output<typeof SeenState>>): void {
        ctx.state.count += 1;
        ctx.state.seen.push(ctx.messageId);
      }
    }

    it('parses the stored state with the schema: a field added later gets its default', async () => {
      const store = new InMemorySagaStore({ clock });
      // Saved before the saga's schema had `seen`.
      await store.save(
        {
          saga: 'sagas.Seen',
          id: 'c-1',
          state: { count: 1 },
          status: 'active',
          timeouts: [],
          now: clock.now(),
        },
        0,
      );
      bus = await createTestBus({ clock, sagas: [SeenSaga], sagaStore: store });
      const id = await bus.publish(Counted, { counter: 'c-1' });
      await bus.whenIdle();
      expect(await bus.deadLetters.count()).toBe(0);
      expect((await store.get('sagas.Seen', 'c-1'))?.state).toEqual({ count: 2, seen: [id] });
    });

    it('dead-letters a message whose instance has a stored state the schema refuses, naming the fix', async () => {
      const store = new InMemorySagaStore({ clock });
      await store.save(
        {
          saga: 'sagas.Seen',
          id: 'c-1',
          state: { count: 'one' },
          status: 'active',
          timeouts: [],
          now: clock.now(),
        },
        0,
      );
      bus = await createTestBus({ clock, sagas: [SeenSaga], sagaStore: store });
      await bus.publish(Counted, { counter: 'c-1' });
      await bus.whenIdle();
      const { records } = await bus.deadLetters.list();
      expect(records).toHaveLength(1);
      expect(records[0]?.error.message).toMatch(
        /stored state .*migrate the stored state or relax the schema/s,
      );
      expect((await store.get('sagas.Seen', 'c-1'))?.version).toBe(1);
    });

    it('runs a step on an instance from a store that leaves applied out', async () => {
      /** A third-party store that keeps no redelivery bookkeeping. */
      class NoAppliedStore extends InMemorySagaStore {
        override async get(saga: string, id: string) {
          const instance = await super.get(saga, id);
          if (instance === undefined) return undefined;
          const { applied: _applied, ...rest } = instance;
          return rest as typeof instance;
        }
      }
      const store = new NoAppliedStore({ clock });
      bus = await createTestBus({ clock, sagas: [SeenSaga], sagaStore: store });
      await bus.publish(Counted, { counter: 'c-1' });
      await bus.publish(Counted, { counter: 'c-1' });
      await bus.whenIdle();
      expect(await bus.deadLetters.count()).toBe(0);
      expect((await store.get('sagas.Seen', 'c-1'))?.state).toMatchObject({ count: 2 });
    });
  });

  describe('conflictTries', () => {
    /** Every save loses, as if another process always saved first. */
    class AlwaysConflicting extends InMemorySagaStore {
      saves = 0;
      override save(write: SagaWrite, expectedVersion: number) {
        this.saves += 1;
        return Promise.reject(
          new SagaConflictError(write.saga, write.id, expectedVersion, expectedVersion + 1),
        );
      }
    }

    it.each([
      ['conflictTries: 3', 3, 3],
      ['the default of 10', undefined, 10],
    ])(
      'runs a step that keeps losing that many times, then fails its delivery (%s)',
      async (_name, tries, saves) => {
        const store = new AlwaysConflicting({ clock });
        let runs = 0;
        @Saga('sagas.Contended', {
          state: CounterState,
          retry: { attempts: 1 },
          ...(tries !== undefined ? { conflictTries: tries } : {}),
        })
        class Contended {
          @StartedBy(Counted, { correlate: 'counter' })
          count(): void {
            runs += 1;
          }
        }
        bus = await createTestBus({ clock, sagas: [Contended], sagaStore: store });
        await bus.publish(Counted, { counter: 'c-1' });
        await bus.whenIdle();
        expect(store.saves).toBe(saves);
        expect(runs).toBe(saves);
        const { records } = await bus.deadLetters.list();
        expect(records[0]?.error.code).toBe('saga-conflict');
      },
    );
  });

  describe('timeouts', () => {
    it('fires a timeout once, and drops another delivery of it', async () => {
      const store = new InMemorySagaStore({ clock });
      @Saga('sagas.Reminder', { state: FulfilmentState })
      class Reminder {
        @StartedBy(OrderPlaced, { correlate: 'orderId' })
        placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<Fulfilment>): void {
          ctx.requestTimeout(PaymentDue, 60_000, { orderId: payload.orderId });
        }

        @Handles(PaymentDue)
        due(_payload: PayloadOf<typeof PaymentDue>, ctx: SagaContext<Fulfilment>): void {
          ctx.state.reminders += 1;
        }
      }
      bus = await createTestBus({ clock, sagas: [Reminder], sagaStore: store });
      await bus.publish(OrderPlaced, { orderId: 'o-1' });
      await bus.whenIdle({ includeDelayed: false });
      const pending = (await store.get('sagas.Reminder', 'o-1'))?.timeouts;
      expect(pending).toHaveLength(1);
      expect(pending?.[0]).toMatchObject({ type: PaymentDue.type, dueAt: bus.clock.now() + 60_000 });
      await bus.whenIdle();
      const fired = await store.get('sagas.Reminder', 'o-1');
      expect(fired?.timeouts).toEqual([]);
      expect(sagaStateOf<Fulfilment>(fired!).reminders).toBe(1);
      // The same timeout delivered again (another copy under a new message id) is dropped.
      const [timeout] = bus.messagesOf(PaymentDue);
      const copy = { ...JSON.parse(timeout!.body), id: uuidv7() } as { id: string };
      await bus.broker.publish({
        id: copy.id,
        kind: 'event',
        type: PaymentDue.type,
        body: JSON.stringify(copy),
      });
      await bus.whenIdle();
      const after = await store.get('sagas.Reminder', 'o-1');
      expect(sagaStateOf<Fulfilment>(after!).reminders).toBe(1);
      expect(after?.version).toBe(2);
    });

    it('cancels the order when the timeout comes first', async () => {
      const store = new InMemorySagaStore({ clock });
      bus = await createTestBus({ clock, sagas: [fulfilmentSaga()], sagaStore: store });
      await bus.publish(OrderPlaced, { orderId: 'o-1' });
      await bus.whenIdle();
      expect(bus.messagesOf(OrderCancelled).map((m) => m.payload)).toEqual([{ orderId: 'o-1' }]);
      expect((await store.get('sagas.Fulfilment', 'o-1'))?.status).toBe('completed');
    });

    it.each<SagaMissingRule>(['ignore', 'dead-letter'])(
      'drops a timeout that arrives after completion (onCompleted: %s)',
      async (onCompleted) => {
        const store = new InMemorySagaStore({ clock });
        bus = await createTestBus({ clock, sagas: [fulfilmentSaga({ onCompleted })], sagaStore: store });
        await bus.publish(OrderPlaced, { orderId: 'o-1' });
        await bus.whenIdle({ includeDelayed: false });
        await bus.publish(PaymentCaptured, { reference: 'pay:o-1' });
        await bus.whenIdle();
        expect(bus.messagesOf(PaymentDue)).toHaveLength(1);
        expect(bus.messagesOf(OrderCancelled)).toEqual([]);
        expect(await bus.deadLetters.count()).toBe(0);
        expect((await store.get('sagas.Fulfilment', 'o-1'))?.version).toBe(2);
      },
    );
  });

  describe('rules for messages an instance cannot take', () => {
    /** Completes instance o-1, then publishes one more PaymentCaptured for it. */
    async function lateEventAfterCompletion(onCompleted?: SagaMissingRule) {
      const store = new InMemorySagaStore({ clock });
      const rules = onCompleted === undefined ? {} : { onCompleted };
      bus = await createTestBus({ clock, sagas: [paymentOnlySaga(rules)], sagaStore: store });
      for (const publish of [
        () => bus!.publish(OrderPlaced, { orderId: 'o-1' }),
        () => bus!.publish(PaymentCaptured, { reference: 'pay:o-1' }),
        () => bus!.publish(PaymentCaptured, { reference: 'pay:o-1' }),
      ]) {
        await publish();
        await bus.whenIdle();
      }
      return { store, bus, records: (await bus.deadLetters.list()).records };
    }

    /** Publishes a PaymentCaptured for an order no instance exists for. */
    async function eventForMissingInstance(onMissing?: SagaMissingRule) {
      const store = new InMemorySagaStore({ clock });
      const rules = onMissing === undefined ? {} : { onMissing };
      bus = await createTestBus({ clock, sagas: [paymentOnlySaga(rules)], sagaStore: store });
      await bus.publish(PaymentCaptured, { reference: 'pay:o-9' });
      await bus.whenIdle();
      expect(await store.get('sagas.PaymentOnly', 'o-9')).toBeUndefined();
      return (await bus.deadLetters.list()).records;
    }

    it('ignores a late event after completion by default', async () => {
      const { store, records } = await lateEventAfterCompletion();
      expect(await store.get('sagas.PaymentOnly', 'o-1')).toMatchObject({ status: 'completed', version: 2 });
      expect(records).toEqual([]);
    });

    it("dead-letters a late event after completion as saga-completed with onCompleted: 'dead-letter'", async () => {
      const { store, records } = await lateEventAfterCompletion('dead-letter');
      expect(records.map((r) => [r.reason, r.handler, r.error.code])).toEqual([
        ['saga-completed', 'sagas.PaymentOnly', 'saga-completed'],
      ]);
      expect((await store.get('sagas.PaymentOnly', 'o-1'))?.version).toBe(2);
    });

    it('ignores a message for a missing instance by default, creating nothing', async () => {
      expect(await eventForMissingInstance()).toEqual([]);
    });

    it("dead-letters a message for a missing instance as saga-not-found with onMissing: 'dead-letter'", async () => {
      const records = await eventForMissingInstance('dead-letter');
      expect(records.map((r) => r.reason)).toEqual(['saga-not-found']);
      expect(records[0]?.attemptCount).toBe(1);
    });
  });

  describe('with commands', () => {
    const StartCheckout = defineCommand('sagas.StartCheckout', {
      schema: z.object({ cartId: z.string() }),
    });
    const ExpireCart = defineCommand('sagas.ExpireCart', { schema: z.object({ cartId: z.string() }) });
    const CartExpired = defineEvent('sagas.CartExpired', { schema: z.object({ cartId: z.string() }) });

    @Saga('sagas.Checkout', { state: CounterState })
    class Checkout {
      @StartedBy(StartCheckout, { correlate: 'cartId' })
      start(payload: PayloadOf<typeof StartCheckout>, ctx: SagaContext<{ count: number }>): void {
        ctx.state.count += 1;
        ctx.requestTimeout(ExpireCart, 1_000, { cartId: payload.cartId });
      }

      @Handles(ExpireCart)
      expire(payload: PayloadOf<typeof ExpireCart>, ctx: SagaContext<{ count: number }>): void {
        ctx.publish(CartExpired, { cartId: payload.cartId });
        ctx.complete();
      }
    }

    it('is started by a command and takes a command timeout as the one handler of its type', async () => {
      const store = new InMemorySagaStore({ clock });
      bus = await createTestBus({ clock, sagas: [Checkout], sagaStore: store });
      await bus.send(StartCheckout, { cartId: 'c-1' });
      await bus.whenIdle();
      expect(bus.messagesOf(CartExpired).map((m) => m.payload)).toEqual([{ cartId: 'c-1' }]);
      expect(await store.get('sagas.Checkout', 'c-1')).toMatchObject({ status: 'completed', version: 2 });
    });

    it('refuses to execute a saga command in process', async () => {
      bus = await createTestBus({ clock, sagas: [Checkout] });
      await expect(bus.execute(StartCheckout, { cartId: 'c-1' })).rejects.toThrow(/send it instead/);
    });
  });

  describe('declaring', () => {
    it('checks correlation fields and step payloads at compile time', () => {
      class Typed {
        // @ts-expect-error 'nope' is not a field of the OrderPlaced payload
        @StartedBy(OrderPlaced, { correlate: 'nope' })
        placed(_payload: PayloadOf<typeof OrderPlaced>): void {}

        // @ts-expect-error the method takes another definition's payload
        @Handles(PaymentCaptured, { correlate: byReference })
        paid(_payload: PayloadOf<typeof OrderPlaced>): void {}
      }
      expect(Typed).toBeTypeOf('function');
    });

    it('refuses a saga listed in handlers, naming the fix', () => {
      expect(() => createBus({ handlers: [CounterSaga] })).toThrow(/list it in sagas instead/);
    });

    it.each([
      ['keepApplied', 0],
      ['keepApplied', 1.5],
      ['keepAppliedMs', 0],
      ['keepAppliedMs', 60.5],
      ['conflictTries', 0],
      ['conflictTries', -1],
      ['conflictTries', Number.NaN],
    ])('refuses %s %s with invalid-option, naming the fix', (option, value) => {
      const declare = () => Saga('sagas.Invalid', { state: CounterState, [option]: value });
      expect(declare).toThrow(expect.objectContaining({ code: 'invalid-option' }));
      expect(declare).toThrow(
        new RegExp(
          `@Saga\\('sagas.Invalid'\\) ${option} must be a whole number of at least 1.*pass e\\.g\\.`,
        ),
      );
    });

    it('takes keepApplied, keepAppliedMs and conflictTries of at least 1', () => {
      expect(() =>
        Saga('sagas.Valid', { state: CounterState, keepApplied: 1, keepAppliedMs: 1, conflictTries: 1 }),
      ).not.toThrow();
    });

    it('refuses a saga without @StartedBy', () => {
      @Saga('sagas.NoStart', { state: CounterState })
      class NoStart {
        @Handles(Counted, { correlate: 'counter' })
        count(): void {}
      }
      expect(() => createBus({ sagas: [NoStart] })).toThrow(/has no @StartedBy/);
    });

    it('dead-letters a message whose correlation gives no id', async () => {
      bus = await createTestBus({ clock, sagas: [CounterSaga] });
      await bus.publish(Counted, { counter: '' });
      await bus.whenIdle();
      const { records } = await bus.deadLetters.list();
      expect(records[0]?.error.message).toContain('cannot correlate "sagas.Counted"');
      expect(records[0]?.attemptCount).toBe(1);
    });
  });
});
