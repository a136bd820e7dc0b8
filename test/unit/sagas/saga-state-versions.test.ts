import { afterEach, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  InMemoryBroker,
  InMemorySagaStore,
  ManualClock,
  Saga,
  StartedBy,
  createBus,
  silentLogger,
  upcasters,
  type DeadLetteredEvent,
  type Logger,
  type MessageBus,
  type PayloadOf,
  type SagaContext,
} from '../../../src/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import {
  ItemAdded,
  OrderSagaV1,
  OrderSagaV2,
  RAISED,
  StateV1,
  runVersion1ThenVersion2,
  type StateV2,
} from '../../helpers/saga-state-versions.js';

const DAY_MS = 24 * 60 * 60 * 1000;

/** Version 3: the currency moves to the order; two steps raise a version-1 state. */
const StateV3 = z.object({ amount: z.number(), currency: z.string(), items: z.number() });
type StateV3 = z.output<typeof StateV3>;

@Saga('sagaver.Order', {
  state: StateV3,
  version: 3,
  upcast: upcasters<StateV1>()
    .step((v1): StateV2 => ({ total: { amount: v1.total, currency: 'EUR' }, items: 1 }))
    .step((v2) => ({ amount: v2.total.amount, currency: v2.total.currency, items: v2.items })),
})
class OrderSagaV3 {
  @StartedBy(ItemAdded, { correlate: 'orderId' })
  add(payload: PayloadOf<typeof ItemAdded>, ctx: SagaContext<StateV3>): void {
    ctx.state.amount += payload.amount;
    ctx.state.items += 1;
  }
}

/** Version 2 with an upcaster that cannot raise a state. */
@Saga('sagaver.Order', {
  state: z.object({ total: z.object({ amount: z.number() }) }),
  version: 2,
  upcast: upcasters<StateV1>().step((): { total: { amount: number } } => {
    throw new Error('no currency known for this order');
  }),
})
class BrokenUpcastSaga {
  @StartedBy(ItemAdded, { correlate: 'orderId' })
  add(): void {
    throw new Error('the step must not run');
  }
}

describe('Saga state versions', () => {
  let bus: TestBus | undefined;
  const buses: MessageBus[] = [];
  afterEach(async () => {
    await bus?.stop();
    bus = undefined;
    for (const started of buses.splice(0)) await started.stop({ closeBroker: false });
  });

  describe('a state stored by an older version of the saga', () => {
    it('is raised to the saga version by its upcaster, the step runs on it, and it is saved with the new version', async () => {
      const store = new InMemorySagaStore();
      const run = await runVersion1ThenVersion2(store, 'o-1');
      expect(run.afterV1).toMatchObject(RAISED.afterV1);
      expect(run.afterV2).toMatchObject(RAISED.afterV2);
      expect(run.deadLetters).toBe(0);
    });

    it('is raised step by step over several versions', async () => {
      const clock = new ManualClock();
      const store = new InMemorySagaStore({ clock });
      await store.save(
        { saga: 'sagaver.Order', id: 'o-1', state: { total: 5 }, status: 'active', timeouts: [], now: 0 },
        0,
      );
      bus = await createTestBus({ clock, sagas: [OrderSagaV3], sagaStore: store });
      await bus.publish(ItemAdded, { orderId: 'o-1', amount: 3 });
      await bus.whenIdle();
      expect(await bus.deadLetters.count()).toBe(0);
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject({
        state: { amount: 8, currency: 'EUR', items: 2 },
        stateVersion: 3,
        version: 2,
      });
    });

    it('dead-letters the message when an upcast step throws, naming the versions and the error, and keeps the state', async () => {
      const clock = new ManualClock();
      const store = new InMemorySagaStore({ clock });
      await store.save(
        { saga: 'sagaver.Order', id: 'o-1', state: { total: 5 }, status: 'active', timeouts: [], now: 0 },
        0,
      );
      bus = await createTestBus({ clock, sagas: [BrokenUpcastSaga], sagaStore: store });
      await bus.publish(ItemAdded, { orderId: 'o-1', amount: 3 });
      await bus.whenIdle();
      const { records } = await bus.deadLetters.list();
      expect(records).toHaveLength(1);
      expect(records[0]?.attempts).toHaveLength(1);
      expect(records[0]?.error.message).toMatch(
        /stored state version 1 could not be raised to version 2: an upcast step threw no currency known for this order/,
      );
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject({
        state: { total: 5 },
        stateVersion: 1,
        version: 1,
      });
    });
  });

  describe('a state stored by a newer version of the saga (a rolling deploy)', () => {
    function setup() {
      const clock = new ManualClock();
      const broker = new InMemoryBroker({ clock });
      const store = new InMemorySagaStore({ clock });
      const warnings: Record<string, unknown>[] = [];
      const logger: Logger = {
        ...silentLogger,
        warn: (message, fields) => {
          if (message.startsWith('Saga state is newer than this code')) warnings.push(fields ?? {});
        },
      };
      const deadLettered: string[] = [];
      const hooks = {
        onDeadLettered: (event: DeadLetteredEvent) => {
          deadLettered.push(event.record.reason);
        },
      };
      const worker = (sagas: [typeof OrderSagaV1 | typeof OrderSagaV2]) => {
        const created = createBus({
          endpoint: 'orders',
          broker,
          clock,
          sagas,
          sagaStore: store,
          logger,
          hooks,
        });
        buses.push(created);
        return created;
      };
      return { clock, broker, store, warnings, deadLettered, worker };
    }

    /** Saves instance o-1 as version 2 of the saga does. */
    async function savedByVersion2(store: InMemorySagaStore, clock: ManualClock): Promise<void> {
      await store.save(
        {
          saga: 'sagaver.Order',
          id: 'o-1',
          state: { total: { amount: 5, currency: 'EUR' }, items: 1 },
          stateVersion: 2,
          status: 'active',
          timeouts: [],
          now: clock.now(),
        },
        0,
      );
    }

    it('releases the message with a warning, spending no attempt and leaving the state, and a version-2 worker handles it', async () => {
      const { clock, store, warnings, deadLettered, worker } = setup();
      await savedByVersion2(store, clock);
      const old = worker([OrderSagaV1]);
      await old.start();
      await old.publish(ItemAdded, { orderId: 'o-1', amount: 3 });
      await expect.poll(() => warnings.length).toBe(1);
      expect(warnings[0]).toMatchObject({
        saga: 'sagaver.Order',
        sagaId: 'o-1',
        type: 'sagaver.ItemAdded',
        stateVersion: 2,
        knownVersion: 1,
        attempt: 1,
      });
      // Beyond the default 8 attempts: none is spent, none dead-letters.
      for (let delivery = 2; delivery <= 10; delivery++) {
        clock.advanceTo(warnings.at(-1)?.retryAt as number);
        await expect.poll(() => warnings.length).toBe(delivery);
      }
      expect(warnings.map((w) => w.attempt)).toEqual(Array.from({ length: 10 }, () => 1));
      expect(deadLettered).toEqual([]);
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject({ stateVersion: 2, version: 1 });

      await old.stop({ closeBroker: false });
      await worker([OrderSagaV2]).start();
      clock.advance(5 * 60 * 1000);
      await expect
        .poll(async () => (await store.get('sagaver.Order', 'o-1'))?.state)
        .toEqual({ total: { amount: 8, currency: 'EUR' }, items: 2 });
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject({ stateVersion: 2, version: 2 });
      expect(deadLettered).toEqual([]);
    });

    it('dead-letters the message as version-unsupported once the state waited 24 hours, naming the fix', async () => {
      const { clock, store, warnings, deadLettered, worker } = setup();
      await savedByVersion2(store, clock);
      const old = worker([OrderSagaV1]);
      await old.start();
      await old.publish(ItemAdded, { orderId: 'o-1', amount: 3 });
      await expect.poll(() => warnings.length).toBe(1);
      clock.advance(DAY_MS);
      await expect.poll(() => deadLettered).toEqual(['version-unsupported']);
      const [record] = (await old.deadLetters.list()).records;
      expect(record?.error.message).toMatch(
        /state was saved with version 2, and this process knows versions up to 1: deploy the code with version 2 of @Saga\('sagaver.Order'\).*replay it once one runs/,
      );
      expect(await store.get('sagaver.Order', 'o-1')).toMatchObject({ stateVersion: 2, version: 1 });
    });
  });

  describe('declaring', () => {
    it.each([0, -1, 1.5, Number.NaN])('refuses version %s with invalid-option, naming the fix', (version) => {
      const declare = () => Saga('sagaver.Invalid', { state: StateV1, version });
      expect(declare).toThrow(expect.objectContaining({ code: 'invalid-option' }));
      expect(declare).toThrow(/@Saga\('sagaver.Invalid'\) version must be a whole number of at least 1/);
    });

    it('types each upcast step from the one before, and the last must return the state input', () => {
      Saga('sagaver.Typed', {
        state: StateV3,
        version: 3,
        upcast: upcasters<StateV1>()
          .step((v1) => {
            expectTypeOf(v1).toEqualTypeOf<StateV1>();
            return { amount: v1.total };
          })
          .step((v2) => {
            expectTypeOf(v2).toEqualTypeOf<{ amount: number }>();
            return { ...v2, currency: 'EUR', items: 0 };
          }),
      });
      Saga('sagaver.Typed', {
        state: StateV3,
        version: 2,
        // @ts-expect-error the last step must return the state schema's input: currency is missing
        upcast: upcasters<StateV1>().step((v1) => ({ amount: v1.total, items: 0 })),
      });
    });

    it('refuses upcast steps that are not one per older version, with invalid-option naming the fix', () => {
      const missing = () => Saga('sagaver.Invalid', { state: StateV1, version: 3 });
      expect(missing).toThrow(expect.objectContaining({ code: 'invalid-option' }));
      expect(missing).toThrow(
        "@Saga('sagaver.Invalid') is version 3 with 0 upcast steps: give one step per older version (2), e.g. upcast: upcasters<StateV1>().step((v1) => v2).step((v2) => v3)",
      );
      const extra = () =>
        Saga('sagaver.Invalid', {
          state: StateV1,
          upcast: upcasters<StateV1>().step((v1) => v1),
        });
      expect(extra).toThrow(/is version 1 with 1 upcast steps/);
    });
  });
});
