import 'reflect-metadata';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  HarrierError,
  On,
  Projection,
  defineCommand,
  defineEvent,
  type PayloadOf,
} from '../../../src/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';

const buses: TestBus[] = [];
afterEach(async () => {
  for (const bus of buses.splice(0)) await bus.stop({ gracePeriodMs: 100 });
});

/**
 * A small shop whose read model is right only if messages of one order are handled in the order
 * they were sent: the last address change wins, and a cancellation follows the placement. Every
 * message carries the order id as its partition key; `ordered` says whether the definitions ask for
 * per-key order.
 */
function shop(ordered: boolean) {
  const ChangeAddress = defineCommand('shop.ChangeAddress', {
    schema: z.object({ orderId: z.string(), address: z.string() }),
    partitionKey: 'orderId',
    ordered,
  });
  const OrderPlaced = defineEvent('shop.OrderPlaced', {
    schema: z.object({ orderId: z.string() }),
    partitionKey: 'orderId',
    ordered,
  });
  const OrderCancelled = defineEvent('shop.OrderCancelled', {
    schema: z.object({ orderId: z.string() }),
    partitionKey: 'orderId',
    ordered,
  });
  const addresses = new Map<string, string>();
  const statuses = new Map<string, string>();

  @CommandHandler(ChangeAddress)
  class ChangeAddressHandler {
    handle(command: PayloadOf<typeof ChangeAddress>): void {
      addresses.set(command.orderId, command.address);
    }
  }

  @Projection('OrderStatus')
  class OrderStatusProjection {
    @On(OrderPlaced)
    placed(event: PayloadOf<typeof OrderPlaced>): void {
      statuses.set(event.orderId, 'placed');
    }

    @On(OrderCancelled)
    cancelled(event: PayloadOf<typeof OrderCancelled>): void {
      statuses.set(event.orderId, 'cancelled');
    }
  }

  /** Sends and publishes the story of three orders, one call after another, and waits for the bus. */
  async function play(bus: TestBus): Promise<{ addresses: object; statuses: object }> {
    for (const orderId of ['o-1', 'o-2', 'o-3']) {
      for (const street of ['1 Old Road', '2 New Street', '3 Final Avenue'])
        await bus.send(ChangeAddress, { orderId, address: street });
      await bus.publish(OrderPlaced, { orderId });
      await bus.publish(OrderCancelled, { orderId });
    }
    await bus.whenIdle();
    return { addresses: Object.fromEntries(addresses), statuses: Object.fromEntries(statuses) };
  }

  return { handlers: [ChangeAddressHandler, OrderStatusProjection], play };
}

const RIGHT = {
  addresses: { 'o-1': '3 Final Avenue', 'o-2': '3 Final Avenue', 'o-3': '3 Final Avenue' },
  statuses: { 'o-1': 'cancelled', 'o-2': 'cancelled', 'o-3': 'cancelled' },
};

/** Runs the shop story on a fresh test bus and returns its read model. */
async function readModel(ordered: boolean, options: { seed?: number; deliveryOrder?: 'fifo' } = {}) {
  const app = shop(ordered);
  const bus = await createTestBus({ handlers: app.handlers, ...options });
  buses.push(bus);
  return { bus, model: await app.play(bus) };
}

const SEEDS = Array.from({ length: 20 }, (_, i) => i + 1);

describe('createTestBus', () => {
  describe('when an app relies on an order its definitions never asked for', () => {
    it('gets a wrong read model for some seeds, and the same one every time for a given seed', async () => {
      const wrongSeeds: number[] = [];
      for (const seed of SEEDS) {
        const { model } = await readModel(false, { seed });
        if (JSON.stringify(model) !== JSON.stringify(RIGHT)) wrongSeeds.push(seed);
      }
      // Nearly every seed breaks at least one of the six per-order sequences.
      expect(wrongSeeds.length).toBeGreaterThan(SEEDS.length / 2);

      const seed = wrongSeeds[0] ?? 0;
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push((await readModel(false, { seed })).model);
      expect(runs[0]).not.toEqual(RIGHT);
      expect(runs[1]).toEqual(runs[0]);
      expect(runs[2]).toEqual(runs[0]);
    });
  });

  describe('when the definitions ask for per-key order', () => {
    it('gets the right read model for every seed', async () => {
      for (const seed of SEEDS) {
        const { model } = await readModel(true, { seed });
        expect(model, `seed ${seed}`).toEqual(RIGHT);
      }
    });
  });

  describe('when deliveryOrder is fifo', () => {
    it('handles messages in publish order, so the unordered app passes', async () => {
      const { bus, model } = await readModel(false, { deliveryOrder: 'fifo' });
      expect(bus.broker.deliveryOrder).toBe('fifo');
      expect(model).toEqual(RIGHT);
    });
  });

  describe('.seed', () => {
    describe('when no seed is given', () => {
      it('is the shuffled broker’s random seed', async () => {
        const { bus } = await readModel(true);
        expect(bus.broker.deliveryOrder).toBe('shuffled');
        expect(bus.seed).toBe(bus.broker.seed);
      });
    });

    describe('when HARRIER_SEED is set', () => {
      afterEach(() => {
        delete process.env.HARRIER_SEED;
      });

      it('uses it, unless a seed is passed', async () => {
        process.env.HARRIER_SEED = '4242';
        expect((await readModel(true)).bus.seed).toBe(4242);
        expect((await readModel(true, { seed: 7 })).bus.seed).toBe(7);
      });

      it('refuses a value that is not a whole number with "invalid-option"', async () => {
        process.env.HARRIER_SEED = 'abc';
        const error = await createTestBus().catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('invalid-option');
        expect((error as Error).message).toContain('HARRIER_SEED="abc"');
      });
    });
  });

  describe('.whenIdle', () => {
    describe('when it times out on a shuffled bus', () => {
      it('names the seed and how to replay it', async () => {
        const Stuck = defineCommand('shop.Stuck', { schema: z.object({}) });
        @CommandHandler(Stuck)
        class StuckHandler {
          handle(_: unknown, ctx: { signal: AbortSignal }): Promise<void> {
            return new Promise((resolve) => {
              ctx.signal.addEventListener('abort', () => {
                resolve();
              });
            });
          }
        }
        const bus = await createTestBus({ handlers: [StuckHandler], seed: 99 });
        buses.push(bus);
        await bus.send(Stuck, {});
        const error = await bus.whenIdle({ timeoutMs: 50 }).catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('not-idle');
        expect((error as Error).message).toContain('seed 99');
        expect((error as Error).message).toContain('HARRIER_SEED=99');
      });
    });
  });
});
