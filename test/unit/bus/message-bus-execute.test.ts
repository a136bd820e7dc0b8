import 'reflect-metadata';
import { z } from 'zod';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  HarrierError,
  ManualClock,
  defineCommand,
  type Envelope,
  type MessageContext,
  type Middleware,
  type PayloadOf,
  type SendOptions,
} from '../../../src/index.js';
import { uuidV7Time } from '../../../src/extend.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { OrderPlaced, PlaceOrder } from './fixtures.js';

let bus: TestBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

/** What a handler saw of its context, read when it was asked to. */
interface Seen {
  readonly messageId: string;
  readonly correlationId: string;
  readonly causationId: string | undefined;
  readonly headers: Readonly<Record<string, string>>;
  readonly envelope: Envelope;
}

const seenOf = (ctx: MessageContext): Seen => ({
  messageId: ctx.messageId,
  correlationId: ctx.correlationId,
  causationId: ctx.causationId,
  headers: ctx.headers,
  envelope: ctx.envelope,
});

/** A promise and the function that resolves it. */
function gate(): { readonly opened: Promise<void>; readonly open: () => void } {
  let open = (): void => undefined;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

/** Executes one PlaceOrder on a new test bus whose handler reads its whole context; returns what it saw. */
async function executeAndSee(options?: SendOptions): Promise<Seen | undefined> {
  let seen: Seen | undefined;
  @CommandHandler(PlaceOrder)
  class Handler {
    handle(_payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
      seen = seenOf(ctx);
    }
  }
  bus = await createTestBus({ handlers: [Handler] });
  await bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 }, options);
  return seen;
}

describe('MessageBus', () => {
  describe('.execute', () => {
    describe('when the handler first reads its context after the clock moved on', () => {
      it('sees the envelope of the call: id and occurredAt of the call time, options as given then', async () => {
        const clock = new ManualClock(Date.UTC(2026, 0, 2, 3, 4, 5, 6));
        const calledAt = clock.now();
        const later = gate();
        let seen: Seen | undefined;
        @CommandHandler(PlaceOrder)
        class Handler {
          async handle(_payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): Promise<void> {
            await later.opened;
            seen = seenOf(ctx);
          }
        }
        bus = await createTestBus({ handlers: [Handler], clock });
        const headers: Record<string, string> = { tenant: 't-1' };
        const options = { correlationId: 'corr-1', causationId: 'cause-1', headers };
        const done = bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 }, options);
        // The caller changes its objects and the clock moves before the handler reads anything.
        headers.tenant = 't-2';
        options.correlationId = 'corr-2';
        clock.advance(5_000);
        later.open();
        await done;
        expect(seen?.correlationId).toBe('corr-1');
        expect(seen?.causationId).toBe('cause-1');
        expect(seen?.headers).toEqual({ tenant: 't-1' });
        expect(uuidV7Time(seen?.messageId ?? '')).toBe(calledAt);
        expect(seen?.envelope.meta.occurredAt).toBe(new Date(calledAt).toISOString());
        expect(seen?.envelope).toMatchObject({
          id: seen?.messageId,
          kind: 'command',
          type: PlaceOrder.type,
          payload: { orderId: 'o-1', amount: 3 },
          meta: { correlationId: 'corr-1', causationId: 'cause-1', partitionKey: 'o-1' },
        });
      });
    });

    describe('when another message gets an id before the handler first reads its context', () => {
      it('keeps the id of the call time, and ids in call order', async () => {
        const clock = new ManualClock(Date.UTC(2026, 0, 2, 3, 4, 5, 6));
        const calledAt = clock.now();
        const later = gate();
        const seen: Seen[] = [];
        let calls = 0;
        @CommandHandler(PlaceOrder)
        class Handler {
          async handle(_payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): Promise<void> {
            if (calls++ === 0) await later.opened;
            seen.push(seenOf(ctx));
          }
        }
        bus = await createTestBus({ handlers: [Handler], clock });
        const first = bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 });
        // A second call, 5 s later, whose handler reads its id at once.
        clock.advance(5_000);
        await bus.execute(PlaceOrder, { orderId: 'o-2', amount: 3 });
        later.open();
        await first;
        const [second, firstSeen] = seen;
        expect(uuidV7Time(firstSeen?.messageId ?? '')).toBe(calledAt);
        expect(uuidV7Time(firstSeen?.messageId ?? '')).toBe(
          Date.parse(firstSeen?.envelope.meta.occurredAt ?? ''),
        );
        expect((firstSeen?.messageId ?? '') < (second?.messageId ?? '')).toBe(true);
      });
    });

    describe('when no options are given', () => {
      it('correlates the message with itself, with no causation and no headers', async () => {
        const seen = await executeAndSee();
        expect(seen?.correlationId).toBe(seen?.messageId);
        expect(seen?.causationId).toBeUndefined();
        expect(seen?.headers).toEqual({});
        expect(seen?.envelope.id).toBe(seen?.messageId);
      });
    });

    describe('when the caller gives the id', () => {
      it('is the message id', async () => {
        const id = '0190a0b0-0000-7000-8000-0000000000aa';
        const seen = await executeAndSee({ id });
        expect(seen?.messageId).toBe(id);
        expect(seen?.correlationId).toBe(id);
      });
    });

    describe('when middleware and the handler both read the message', () => {
      it('gives both the same id, and the events the handler records that id as causation', async () => {
        const fromMiddleware: string[] = [];
        const fromHandler: string[] = [];
        const middleware: Middleware = {
          name: 'reads-id',
          before(context) {
            fromMiddleware.push(context.message.messageId);
          },
        };
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
            fromHandler.push(ctx.messageId);
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
          }
        }
        bus = await createTestBus({ handlers: [Handler], middleware: [middleware] });
        await bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 });
        await bus.execute(PlaceOrder, { orderId: 'o-2', amount: 3 });
        expect(fromMiddleware).toEqual(fromHandler);
        expect(new Set(fromHandler).size).toBe(2);
        expect(bus.messagesOf(OrderPlaced).map((m) => m.envelope.meta.causationId)).toEqual(fromHandler);
        expect(bus.messagesOf(OrderPlaced).map((m) => m.envelope.meta.correlationId)).toEqual(fromHandler);
      });
    });

    describe('when the handler returns a thenable that records once it settles', () => {
      it('publishes what was recorded after the handler returned', async () => {
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): PromiseLike<string> {
            // Not a native promise: a thenable from another promise library.
            return {
              then(onFulfilled) {
                ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
                return Promise.resolve('done').then(onFulfilled);
              },
            };
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        const result: unknown = await bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 });
        expect(result).toBe('done');
        expect(bus.messagesOf(OrderPlaced)).toHaveLength(1);
      });
    });

    describe('when it is called twice', () => {
      it('resolves a fresh handler instance from the container each time', async () => {
        const instances = new Set<object>();
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(): void {
            instances.add(this);
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        await bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 });
        await bus.execute(PlaceOrder, { orderId: 'o-2', amount: 3 });
        expect(instances.size).toBe(2);
      });
    });

    describe('when it fails before the handler runs', () => {
      it('returns a rejected promise rather than throwing (stopped bus, no handler, bad payload)', async () => {
        bus = await createTestBus();
        const noHandler = bus.execute(PlaceOrder, { orderId: 'o', amount: 1 });
        await expect(noHandler).rejects.toMatchObject({ code: 'no-handler' });
        await bus.stop();
        let stopped: Promise<unknown> | undefined;
        expect(() => {
          stopped = bus?.execute(PlaceOrder, { orderId: 'o', amount: -1 });
        }).not.toThrow();
        await expect(stopped).rejects.toSatisfy(
          (e: unknown) => HarrierError.is(e) && e.code === 'bus-stopped',
        );
      });
    });

    describe("when the definition's partition key function throws", () => {
      it('rejects with its error without calling the handler', async () => {
        const Keyed = defineCommand('test.Keyed', {
          schema: z.object({ n: z.number() }),
          partitionKey: () => {
            throw new Error('no key');
          },
        });
        let calls = 0;
        @CommandHandler(Keyed)
        class Handler {
          handle(): void {
            calls++;
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        await expect(bus.execute(Keyed, { n: 1 })).rejects.toThrow('no key');
        expect(calls).toBe(0);
      });
    });

    describe('when the handler throws synchronously', () => {
      it('rejects with what it threw, and publishes nothing it recorded', async () => {
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
            throw new Error('refused');
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        const pending = bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 });
        await expect(pending).rejects.toThrow('refused');
        expect(bus.messagesOf(OrderPlaced)).toHaveLength(0);
      });
    });
  });
});
