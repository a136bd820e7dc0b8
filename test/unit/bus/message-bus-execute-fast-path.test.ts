import 'reflect-metadata';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  HandlerNotFoundError,
  HarrierError,
  MessageValidationError,
  QueryHandler,
  createBus,
  silentLogger,
  type MessageBus,
  type MessageTelemetry,
  type PayloadOf,
  type ProcessInfo,
  ManualClock,
  type MessageContext,
} from '../../../src/index.js';
import { uuidV7Time } from '../../../src/extend.js';
import { GetTotal, PlaceOrder, ReserveStock } from './fixtures.js';

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

const order = { orderId: 'o-1', amount: 2 };

@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  handle(payload: PayloadOf<typeof PlaceOrder>): { accepted: boolean } {
    return { accepted: payload.amount > 1 };
  }
}

@CommandHandler(ReserveStock)
class ReserveStockHandler {
  handle(): void {
    // void: nothing recorded
  }
}

@QueryHandler(GetTotal)
class GetTotalHandler {
  handle(): number {
    return 42;
  }
}

describe('MessageBus', () => {
  describe('.execute', () => {
    describe('when the clock throws', () => {
      it('rejects with what it threw instead of throwing from execute', async () => {
        let broken = false;
        const clock = {
          now: (): number => {
            if (broken) throw new Error('clock unplugged');
            return Date.now();
          },
          setTimer: (delayMs: number, callback: () => void): (() => void) => {
            const timer = setTimeout(callback, delayMs);
            return () => {
              clearTimeout(timer);
            };
          },
        };
        bus = createBus({ handlers: [PlaceOrderHandler], clock, logger: silentLogger });
        await expect(bus.execute(PlaceOrder, order)).resolves.toEqual({ accepted: true });
        broken = true;
        let pending: Promise<unknown> | undefined;
        expect(() => {
          pending = bus?.execute(PlaceOrder, order);
        }).not.toThrow();
        broken = false;
        await expect(pending).rejects.toThrow('clock unplugged');
      });
    });

    describe('when one definition is executed again and again', () => {
      it('validates the payload on every call', async () => {
        bus = createBus({ handlers: [PlaceOrderHandler], logger: silentLogger });
        await expect(bus.execute(PlaceOrder, order)).resolves.toEqual({ accepted: true });
        await expect(bus.execute(PlaceOrder, order)).resolves.toEqual({ accepted: true });
        const bad = { orderId: 'o-2', amount: -1 };
        await expect(bus.execute(PlaceOrder, bad)).rejects.toBeInstanceOf(MessageValidationError);
        await expect(bus.execute(PlaceOrder, bad)).rejects.toBeInstanceOf(MessageValidationError);
        await expect(bus.execute(PlaceOrder, order)).resolves.toEqual({ accepted: true });
      });
    });

    describe('when definitions alternate', () => {
      it('runs the handler of each definition, not the one remembered from the last call', async () => {
        bus = createBus({
          handlers: [PlaceOrderHandler, ReserveStockHandler, GetTotalHandler],
          logger: silentLogger,
        });
        for (let i = 0; i < 3; i++) {
          await expect(bus.execute(PlaceOrder, order)).resolves.toEqual({ accepted: true });
          await expect(bus.execute(GetTotal, {})).resolves.toBe(42);
          await expect(bus.execute(ReserveStock, { orderId: 'o-1' })).resolves.toBeUndefined();
        }
      });

      it('rejects a definition without a handler after one with a handler ran', async () => {
        bus = createBus({ handlers: [PlaceOrderHandler], logger: silentLogger });
        await bus.execute(PlaceOrder, order);
        await expect(bus.execute(GetTotal, {})).rejects.toBeInstanceOf(HandlerNotFoundError);
        await expect(bus.execute(PlaceOrder, order)).resolves.toEqual({ accepted: true });
      });
    });

    describe('when the bus is stopped after executing', () => {
      it('rejects with bus-stopped instead of running the remembered handler', async () => {
        const stopped = createBus({ handlers: [PlaceOrderHandler], logger: silentLogger });
        await stopped.execute(PlaceOrder, order);
        await stopped.stop();
        const error: unknown = await stopped.execute(PlaceOrder, order).catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('bus-stopped');
      });
    });

    describe('when the definition is not one', () => {
      it('rejects with invalid-definition instead of throwing', async () => {
        bus = createBus({ handlers: [PlaceOrderHandler], logger: silentLogger });
        const execute = bus.execute.bind(bus) as (definition: unknown, payload: unknown) => Promise<unknown>;
        for (const definition of [undefined, null, {}]) {
          let result: Promise<unknown> | undefined;
          expect(() => (result = execute(definition, order))).not.toThrow();
          const error: unknown = await result?.catch((e: unknown) => e);
          expect(HarrierError.is(error) && error.code).toBe('invalid-definition');
        }
      });
    });

    describe('when telemetry is configured', () => {
      it('observes every call', async () => {
        const seen: ProcessInfo[] = [];
        const telemetry: MessageTelemetry = {
          traceparent: () => undefined,
          process: (info) => {
            seen.push(info);
            return { within: (run) => run(), end: () => undefined };
          },
        };
        bus = createBus({ handlers: [PlaceOrderHandler], telemetry, logger: silentLogger });
        await bus.execute(PlaceOrder, order);
        await bus.execute(PlaceOrder, order);
        expect(seen.map((info) => [info.handler, info.inProcess])).toEqual([
          ['PlaceOrderHandler', true],
          ['PlaceOrderHandler', true],
        ]);
      });
    });

    describe('when the message id is read', () => {
      it('carries the time of the call when ids of that time are free', async () => {
        // Far after any id this process has taken, the other tests' included (whatever their order),
        // so the call's own millisecond is free.
        const clock = new ManualClock(Date.UTC(2200, 0, 1));
        const ids: string[] = [];
        @CommandHandler(ReserveStock)
        class Handler {
          handle(_payload: unknown, ctx: MessageContext): void {
            ids.push(ctx.messageId);
          }
        }
        bus = createBus({ handlers: [Handler], clock, logger: silentLogger });
        await bus.execute(ReserveStock, { orderId: 'o-1' });
        expect(ids.map(uuidV7Time)).toEqual([Date.UTC(2200, 0, 1)]);
      });

      it('carries the time of the newest id taken when the clock is behind it', async () => {
        const times: number[] = [];
        @CommandHandler(ReserveStock)
        class Handler {
          handle(_payload: unknown, ctx: MessageContext): void {
            times.push(uuidV7Time(ctx.messageId));
          }
        }
        const ahead = createBus({
          handlers: [Handler],
          clock: new ManualClock(Date.UTC(2101, 0, 1)),
          logger: silentLogger,
        });
        await ahead.execute(ReserveStock, { orderId: 'o-1' });
        await ahead.stop();
        // Ids stay in order, so a call behind the newest id takes that id's time, not its own.
        bus = createBus({
          handlers: [Handler],
          clock: new ManualClock(Date.UTC(2000, 0, 1)),
          logger: silentLogger,
        });
        await bus.execute(ReserveStock, { orderId: 'o-2' });
        await bus.execute(ReserveStock, { orderId: 'o-3' });
        expect(times[0]).toBeGreaterThanOrEqual(Date.UTC(2101, 0, 1));
        expect(times.slice(1)).toEqual([times[0], times[0]]);
      });
    });

    describe('when the handler returns a value whose `then` throws when read', () => {
      it('rejects with that error instead of throwing', async () => {
        @CommandHandler(ReserveStock)
        class Handler {
          handle(): unknown {
            return Object.defineProperty({}, 'then', {
              get(): never {
                throw new Error('then is not readable');
              },
            });
          }
        }
        bus = createBus({ handlers: [Handler], logger: silentLogger });
        let result: Promise<unknown> | undefined;
        expect(() => {
          result = bus?.execute(ReserveStock, { orderId: 'a' });
        }).not.toThrow();
        await expect(result).rejects.toThrow('then is not readable');
      });
    });

    describe('when the handler is void and records nothing', () => {
      it('resolves to undefined through one shared frozen promise', async () => {
        bus = createBus({ handlers: [ReserveStockHandler], logger: silentLogger });
        const first = bus.execute(ReserveStock, { orderId: 'o-1' });
        const second = bus.execute(ReserveStock, { orderId: 'o-2' });
        expect(second).toBe(first);
        expect(Object.isFrozen(first)).toBe(true);
        await expect(first).resolves.toBeUndefined();
      });
    });

    describe("with messageScope.handlerInstances 'reuse'", () => {
      it('calls one handler instance on every call', async () => {
        const instances = new Set<object>();
        @CommandHandler(ReserveStock)
        class Handler {
          handle(): void {
            instances.add(this);
          }
        }
        bus = createBus({
          handlers: [Handler],
          messageScope: { handlerInstances: 'reuse' },
          logger: silentLogger,
        });
        for (let i = 0; i < 3; i++) await bus.execute(ReserveStock, { orderId: `o-${i}` });
        expect(instances.size).toBe(1);
      });

      it('keeps one instance per handler when handlers alternate', async () => {
        const instances = new Map<string, Set<object>>();
        const seen = (name: string, instance: object): void => {
          const set = instances.get(name) ?? new Set<object>();
          set.add(instance);
          instances.set(name, set);
        };
        @CommandHandler(ReserveStock)
        class Reserve {
          handle(): void {
            seen('reserve', this);
          }
        }
        @QueryHandler(GetTotal)
        class Total {
          handle(): number {
            seen('total', this);
            return 1;
          }
        }
        bus = createBus({
          handlers: [Reserve, Total],
          messageScope: { handlerInstances: 'reuse' },
          logger: silentLogger,
        });
        for (let i = 0; i < 3; i++) {
          await bus.execute(ReserveStock, { orderId: 'o-1' });
          await bus.execute(GetTotal, {});
        }
        expect([...instances].map(([name, set]) => [name, set.size])).toEqual([
          ['reserve', 1],
          ['total', 1],
        ]);
      });
    });

    describe('by default', () => {
      it('calls a fresh handler instance on every call', async () => {
        const instances = new Set<object>();
        @CommandHandler(ReserveStock)
        class Handler {
          handle(): void {
            instances.add(this);
          }
        }
        bus = createBus({ handlers: [Handler], logger: silentLogger });
        for (let i = 0; i < 3; i++) await bus.execute(ReserveStock, { orderId: `o-${i}` });
        expect(instances.size).toBe(3);
      });
    });

    describe('with a wrong messageScope.handlerInstances', () => {
      it('throws invalid-option naming the values to use', () => {
        const make = (): MessageBus =>
          createBus({
            handlers: [ReserveStockHandler],
            messageScope: { handlerInstances: 'shared' as 'reuse' },
            logger: silentLogger,
          });
        expect(make).toThrow(HarrierError);
        expect(make).toThrow(/handlerInstances is "shared": use 'fresh'.*or 'reuse'/);
      });

      it("throws invalid-option for 'reuse' with scoped services", () => {
        class RequestLog {}
        const make = (): MessageBus =>
          createBus({
            handlers: [ReserveStockHandler],
            messageScope: { handlerInstances: 'reuse', scoped: [RequestLog] },
            logger: silentLogger,
          });
        expect(make).toThrow(/'reuse' cannot be combined with scoped/);
      });
    });
  });
});
