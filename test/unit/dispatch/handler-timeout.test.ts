import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  HarrierError,
  InMemoryBroker,
  InMemoryDeadLetterStore,
  ManualClock,
  On,
  Projection,
  QueryHandler,
  Saga,
  StartedBy,
  createBus,
  defineCommand,
  defineEvent,
  defineQuery,
  silentLogger,
  type BusOptions,
  type LogFields,
  type Logger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import { InMemoryEventLog } from '../../../src/log/index.js';

const Charge = defineCommand('timeout.Charge', { schema: z.object({ orderId: z.string() }) });
const Charged = defineEvent('timeout.Charged', { schema: z.object({ orderId: z.string() }) });
const Quote = defineQuery('timeout.Quote', {
  schema: z.object({ orderId: z.string() }),
  result: z.number(),
});

/** A promise that never settles: a handler stuck on I/O that ignores its signal. */
const NEVER = new Promise<never>(() => undefined);

interface Logged {
  readonly message: string;
  readonly fields: LogFields | undefined;
}

function recordingLogger(): Logger & { warnings: Logged[] } {
  const warnings: Logged[] = [];
  return { ...silentLogger, warnings, warn: (message, fields) => void warnings.push({ message, fields }) };
}

/** A manual clock that counts the timers set on it. */
class CountingClock extends ManualClock {
  timersSet = 0;
  override setTimer(delayMs: number, callback: () => void): () => void {
    this.timersSet++;
    return super.setTimer(delayMs, callback);
  }
}

const buses: MessageBus[] = [];
afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 100 })));
});

function bus(clock: ManualClock, options: BusOptions): MessageBus {
  const made = createBus({
    broker: new InMemoryBroker({ clock }),
    deadLetters: new InMemoryDeadLetterStore(),
    clock,
    logger: silentLogger,
    retry: { attempts: 3, backoff: { baseMs: 10, jitter: 0 } },
    ...options,
  });
  buses.push(made);
  return made;
}

/**
 * Lets work run, moving the clock to its next timer whenever nothing else moves, until `done` holds
 * (bounded by wall time).
 */
async function drive(clock: ManualClock, done: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    if (await done()) return;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    const next = clock.nextTimerAt();
    if (next !== undefined) clock.advanceTo(next);
  }
}

describe('HandlerPipeline', () => {
  describe('handler time-out', () => {
    describe('when a handler never settles on an endpoint of concurrency 1', () => {
      it('handles every other message, and retries then dead-letters the hung one with handler-timeout', async () => {
        const clock = new ManualClock();
        const handled: string[] = [];
        const hungAttempts: { at: number; signal: AbortSignal }[] = [];
        @CommandHandler(Charge)
        class ChargeHandler {
          handle(payload: PayloadOf<typeof Charge>, ctx: MessageContext): Promise<void> {
            if (payload.orderId === 'hung') {
              hungAttempts.push({ at: clock.now(), signal: ctx.signal });
              return NEVER;
            }
            handled.push(payload.orderId);
            return Promise.resolve();
          }
        }
        const b = bus(clock, { handlers: [ChargeHandler], concurrency: 1, handlerTimeoutMs: 1_000 });
        await b.start();
        const hungId = await b.send(Charge, { orderId: 'hung' });
        for (const orderId of ['a', 'b', 'c', 'd']) await b.send(Charge, { orderId });

        await drive(clock, async () => (await b.deadLetters.count()) === 1 && handled.length === 4);

        expect(handled.sort()).toEqual(['a', 'b', 'c', 'd']);
        expect(hungAttempts).toHaveLength(3);
        for (const { signal } of hungAttempts) {
          expect(signal.aborted).toBe(true);
          expect(HarrierError.is(signal.reason, 'handler-timeout')).toBe(true);
        }
        const [record] = (await b.deadLetters.list()).records;
        expect(record).toMatchObject({
          messageId: hungId,
          handler: 'ChargeHandler',
          reason: 'handler-failed',
          attemptCount: 3,
          error: { name: 'HarrierError', code: 'handler-timeout' },
        });
        expect(record?.error.message).toContain('ran past its time-out of 1000 ms');
        expect(record?.attempts.map((a) => a.error.code)).toEqual([
          'handler-timeout',
          'handler-timeout',
          'handler-timeout',
        ]);
      });
    });

    describe('when a handler sets timeoutMs', () => {
      it('times it out after its own time-out, not the bus default', async () => {
        const clock = new ManualClock();
        const start = clock.now();
        @CommandHandler(Charge, { timeoutMs: 250, retry: { attempts: 1 } })
        class ChargeHandler {
          handle(): Promise<void> {
            return NEVER;
          }
        }
        const b = bus(clock, { handlers: [ChargeHandler], handlerTimeoutMs: 60_000 });
        await b.start();
        await b.send(Charge, { orderId: 'o-1' });

        await drive(clock, async () => (await b.deadLetters.count()) === 1);

        const [record] = (await b.deadLetters.list()).records;
        expect(record?.error.code).toBe('handler-timeout');
        expect(record?.lastFailedAt).toBe(start + 250);
      });
    });

    describe('when a handler returns after its time-out', () => {
      it('ignores its result, publishes nothing it recorded, and logs how late it was', async () => {
        const clock = new ManualClock();
        const logger = recordingLogger();
        let release: () => void = () => undefined;
        const handledEvents: string[] = [];
        @CommandHandler(Charge, { retry: { attempts: 1 } })
        class ChargeHandler {
          async handle(payload: PayloadOf<typeof Charge>, ctx: MessageContext): Promise<void> {
            await new Promise<void>((resolve) => (release = resolve));
            ctx.publish(Charged, { orderId: payload.orderId });
          }
        }
        @EventHandler(Charged)
        class ChargedHandler {
          handle(payload: PayloadOf<typeof Charged>): void {
            handledEvents.push(payload.orderId);
          }
        }
        let onHandled = 0;
        const b = bus(clock, {
          handlers: [ChargeHandler, ChargedHandler],
          handlerTimeoutMs: 1_000,
          logger,
          hooks: {
            onHandled: () => {
              onHandled++;
            },
          },
        });
        await b.start();
        const id = await b.send(Charge, { orderId: 'o-1' });
        await drive(clock, async () => (await b.deadLetters.count()) === 1);

        clock.advance(750);
        release();
        await drive(clock, () => logger.warnings.some((w) => w.message.includes('after its time-out')));

        const late = logger.warnings.find((w) => w.message.includes('after its time-out'));
        expect(late?.message).toBe('A handler returned after its time-out; ignored');
        expect(late?.fields).toMatchObject({ handler: 'ChargeHandler', messageId: id, lateMs: 750 });
        expect(onHandled).toBe(0);
        expect(handledEvents).toEqual([]);
        const [record] = (await b.deadLetters.list()).records;
        expect(record).toMatchObject({ reason: 'handler-failed', error: { code: 'handler-timeout' } });
      });
    });

    describe('when a handler throws after its time-out', () => {
      it('logs the late error and changes nothing else', async () => {
        const clock = new ManualClock();
        const logger = recordingLogger();
        let fail: (error: Error) => void = () => undefined;
        @CommandHandler(Charge, { retry: { attempts: 1 } })
        class ChargeHandler {
          handle(): Promise<void> {
            return new Promise((_, reject) => (fail = reject));
          }
        }
        const b = bus(clock, { handlers: [ChargeHandler], handlerTimeoutMs: 1_000, logger });
        await b.start();
        await b.send(Charge, { orderId: 'o-1' });
        await drive(clock, async () => (await b.deadLetters.count()) === 1);

        clock.advance(20);
        fail(new Error('socket closed'));
        await drive(clock, () => logger.warnings.some((w) => w.message.includes('after its time-out')));

        const late = logger.warnings.find((w) => w.message.includes('after its time-out'));
        expect(late?.message).toBe('A handler threw after its time-out; ignored');
        expect(late?.fields).toMatchObject({ lateMs: 20, error: { message: 'socket closed' } });
        expect(await b.deadLetters.count()).toBe(1);
      });
    });

    describe('when the bus stops while a handler hangs', () => {
      it('resolves within its grace period and aborts the handler', async () => {
        const clock = new ManualClock();
        let signal: AbortSignal | undefined;
        @CommandHandler(Charge)
        class ChargeHandler {
          handle(_: unknown, ctx: MessageContext): Promise<void> {
            signal = ctx.signal;
            return NEVER;
          }
        }
        const b = bus(clock, { handlers: [ChargeHandler], concurrency: 1 });
        await b.start();
        await b.send(Charge, { orderId: 'o-1' });
        await drive(clock, () => signal !== undefined);

        const started = Date.now();
        await b.stop({ gracePeriodMs: 200 });

        expect(Date.now() - started).toBeLessThan(2_000);
        expect(HarrierError.is(signal?.reason, 'stopping')).toBe(true);
      });

      it('resolves at once after the hung attempt timed out', async () => {
        const clock = new ManualClock();
        let calls = 0;
        @CommandHandler(Charge, { retry: { attempts: 1 } })
        class ChargeHandler {
          handle(): Promise<void> {
            calls++;
            return NEVER;
          }
        }
        const b = bus(clock, { handlers: [ChargeHandler], concurrency: 1, handlerTimeoutMs: 1_000 });
        await b.start();
        await b.send(Charge, { orderId: 'o-1' });
        await drive(clock, async () => (await b.deadLetters.count()) === 1);

        const started = Date.now();
        // A grace period the hung handler would use up if it still held its slot.
        await b.stop({ gracePeriodMs: 5_000 });

        expect(Date.now() - started).toBeLessThan(1_000);
        expect(calls).toBe(1);
      });
    });

    describe('when a handler returns a plain value', () => {
      it('sets no timer for it, delivered or executed', async () => {
        const clock = new CountingClock();
        const handled: string[] = [];
        @CommandHandler(Charge)
        class ChargeHandler {
          handle(payload: PayloadOf<typeof Charge>): void {
            handled.push(payload.orderId);
          }
        }
        @QueryHandler(Quote)
        class QuoteHandler {
          handle(): number {
            return 42;
          }
        }
        const b = bus(clock, { handlers: [ChargeHandler, QuoteHandler] });
        await b.start();
        const before = clock.timersSet;
        await b.send(Charge, { orderId: 'o-1' });
        await drive(clock, () => handled.length === 1);
        expect(await b.execute(Quote, { orderId: 'o-1' })).toBe(42);

        expect(clock.timersSet).toBe(before);
      });
    });

    describe('when execute runs a handler past its time-out', () => {
      it('rejects with handler-timeout and aborts the call signal only', async () => {
        const clock = new ManualClock();
        const signals: AbortSignal[] = [];
        @QueryHandler(Quote, { timeoutMs: 500 })
        class QuoteHandler {
          handle(payload: PayloadOf<typeof Quote>, ctx: MessageContext): Promise<number> {
            signals.push(ctx.signal);
            return payload.orderId === 'hung' ? NEVER : Promise.resolve(7);
          }
        }
        const b = bus(clock, { handlers: [QuoteHandler] });
        await b.start();
        const hung = b.execute(Quote, { orderId: 'hung' });
        const rejected = hung.then(
          () => undefined,
          (error: unknown) => error,
        );
        await expect(b.execute(Quote, { orderId: 'fine' })).resolves.toBe(7);

        clock.advance(500);
        const error = await rejected;

        expect(HarrierError.is(error, 'handler-timeout')).toBe(true);
        expect(signals[0]?.aborted).toBe(true);
        expect(signals[0]?.reason).toBe(error);
        expect(signals[1]?.aborted).toBe(false);
        expect(clock.nextTimerAt()).toBeUndefined();
      });
    });

    describe('when a projection fed by the event log hangs', () => {
      it('fails the attempt in its lane, dead-letters the event after its attempts and moves on', async () => {
        const clock = new ManualClock();
        const seen: string[] = [];
        @Projection('charges', { timeoutMs: 100, retry: { attempts: 2, backoff: { baseMs: 5, jitter: 0 } } })
        class Charges {
          @On(Charged)
          onCharged(payload: PayloadOf<typeof Charged>): Promise<void> {
            if (payload.orderId === 'hung') return NEVER;
            seen.push(payload.orderId);
            return Promise.resolve();
          }
        }
        const b = bus(clock, {
          handlers: [Charges],
          definitions: [Charged],
          eventLog: new InMemoryEventLog({ topics: [{ name: 'timeout', partitions: 1 }] }),
        });
        await b.start();
        await b.publish(Charged, { orderId: 'hung' });
        await b.publish(Charged, { orderId: 'after' });

        await drive(clock, async () => (await b.deadLetters.count()) === 1 && seen.length === 1);

        expect(seen).toEqual(['after']);
        const [record] = (await b.deadLetters.list()).records;
        expect(record).toMatchObject({
          handler: 'charges',
          reason: 'projection-failed',
          attemptCount: 2,
          error: { code: 'handler-timeout' },
        });
      });
    });

    describe('when a saga step hangs', () => {
      it('dead-letters the message with handler-timeout after its attempts', async () => {
        const clock = new ManualClock();
        @Saga('timeout.Billing', { state: z.object({}), timeoutMs: 100, retry: { attempts: 2 } })
        class Billing {
          @StartedBy(Charged, { correlate: 'orderId' })
          started(): Promise<void> {
            return NEVER;
          }
        }
        const b = bus(clock, { sagas: [Billing], definitions: [Charged] });
        await b.start();
        await b.publish(Charged, { orderId: 'o-1' });

        await drive(clock, async () => (await b.deadLetters.count()) === 1);

        const [record] = (await b.deadLetters.list()).records;
        expect(record).toMatchObject({
          handler: 'timeout.Billing',
          reason: 'handler-failed',
          attemptCount: 2,
          error: { code: 'handler-timeout' },
        });
      });
    });
  });
});

describe('createBus', () => {
  describe('when handlerTimeoutMs is out of range', () => {
    it.each([0, -1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31])(
      'throws invalid-option for %s, naming the values it takes',
      (handlerTimeoutMs) => {
        let thrown: unknown;
        try {
          createBus({ handlerTimeoutMs });
        } catch (error) {
          thrown = error;
        }
        expect(HarrierError.is(thrown, 'invalid-option')).toBe(true);
        expect((thrown as Error).message).toMatch(
          /^handlerTimeoutMs is .*: give a number of milliseconds above 0 and at most 2147483647/,
        );
      },
    );
  });

  describe('when handlerTimeoutMs is at most 2^31 - 1', () => {
    it('accepts it', () => {
      expect(() => createBus({ handlerTimeoutMs: 2 ** 31 - 1 })).not.toThrow();
    });
  });
});

describe('handler decorators', () => {
  describe('when timeoutMs is out of range', () => {
    it('throws invalid-option naming the decorator', () => {
      expect(() => CommandHandler(Charge, { timeoutMs: 2 ** 31 })).toThrow(
        /@CommandHandler\(timeout\.Charge\) timeoutMs is 2147483648: give a number of milliseconds above 0/,
      );
      expect(() => EventHandler(Charged, { timeoutMs: 0 })).toThrow(
        /@EventHandler\(timeout\.Charged\) timeoutMs/,
      );
      expect(() => Projection('p', { timeoutMs: -5 })).toThrow(/@Projection\('p'\) timeoutMs is -5/);
      expect(() => Saga('s', { state: z.object({}), timeoutMs: Number.NaN })).toThrow(
        /@Saga\('s'\) timeoutMs is NaN/,
      );
      try {
        QueryHandler(Quote, { timeoutMs: 2 ** 40 });
      } catch (error) {
        expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      }
    });
  });
});
