import { Container } from 'inversify';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  InMemoryBroker,
  InMemoryDeadLetterStore,
  InMemoryEventLog,
  ManualClock,
  createBus,
  defineCommand,
  defineEvent,
  type MessageContext,
  silentLogger,
  type LogFields,
  type Logger,
  type MessageBus,
  type BusOptions,
  type DeadLetterRecord,
  HarrierError,
} from '../../../src/index.js';
import {
  Dispatcher,
  HandlerRegistry,
  MessagePublisher,
  createContainerInvoker,
  prepareMessage,
  type Delivery,
  type NackOptions,
} from '../../../src/extend.js';
import { DEAD_LETTER_STORE_TRIES } from '../../../src/dispatch/dead-letter-recorder.js';
import { RECEIVER_CLOSE_WAIT_MS } from '../../../src/dispatch/dispatcher.js';
import { ReserveStock } from '../bus/fixtures.js';

/** An in-memory broker whose first `failures` acks and nacks reject, as a flaky network would. */
class FlakyBroker extends InMemoryBroker {
  ackCalls = 0;
  nackCalls = 0;
  constructor(private failures: number) {
    super();
  }
  override ack(id: string): Promise<void> {
    this.ackCalls++;
    if (this.failures-- > 0) return Promise.reject(new Error('connection reset'));
    return super.ack(id);
  }
  override nack(id: string, options: NackOptions): Promise<void> {
    this.nackCalls++;
    if (this.failures-- > 0) return Promise.reject(new Error('connection reset'));
    return super.nack(id, options);
  }
}

function recordingLogger(): Logger & { errors: { message: string; fields?: LogFields }[] } {
  const errors: { message: string; fields?: LogFields }[] = [];
  return {
    ...silentLogger,
    errors,
    error: (message, fields) => void errors.push({ message, ...(fields ? { fields } : {}) }),
  };
}

function waitFor(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + timeoutMs;
    const tick = (): void => {
      if (condition()) resolve();
      else if (Date.now() > deadline) reject(new Error('condition not met in time'));
      else setImmediate(tick);
    };
    tick();
  });
}

/** A dead-letter store whose `add` hangs (never settles) while `down` is true, as a client queueing commands would. */
class HangingStore extends InMemoryDeadLetterStore {
  down = true;
  addCalls = 0;
  override add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    this.addCalls++;
    if (this.down) return new Promise(() => undefined);
    return super.add(record);
  }
}

/**
 * A stock handler that fails order "bad", a dead-letter store that hangs, and a way to bring the
 * store back and start a second bus on the same broker.
 */
function hangingStoreFixture(busOptions: Partial<BusOptions>) {
  const calls: string[] = [];
  @CommandHandler(ReserveStock, { retry: { attempts: 1 } })
  class Handler {
    handle(p: { orderId: string }) {
      calls.push(p.orderId);
      if (p.orderId === 'bad') throw new Error('out of stock');
    }
  }
  const broker = new InMemoryBroker();
  const deadLetters = new HangingStore();
  const options = { broker, deadLetters, handlers: [Handler], logger: silentLogger, ...busOptions };
  /** Resolves with the stored records once the second bus has recorded one dead letter. */
  const recordOnceStoreIsBack = async (): Promise<readonly DeadLetterRecord[]> => {
    deadLetters.down = false;
    let recorded = 0;
    const again = createBus({
      ...options,
      hooks: {
        onDeadLettered: () => {
          recorded++;
        },
      },
    });
    await again.start();
    await waitFor(() => recorded === 1, 10_000);
    const { records } = await deadLetters.list();
    await again.stop();
    return records;
  };
  return { calls, broker, deadLetters, bus: createBus(options), recordOnceStoreIsBack };
}

/** A dead-letter store whose first `failures` adds reject, as a store whose Redis blips would. */
class FlakyStore extends InMemoryDeadLetterStore {
  addCalls = 0;
  constructor(private failures: number) {
    super();
  }
  override add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    this.addCalls++;
    if (this.failures-- > 0) return Promise.reject(new Error('store down'));
    return super.add(record);
  }
}

describe('Dispatcher', () => {
  describe('when storing a dead letter fails, under a ManualClock', () => {
    it('waits between the tries on the injected clock, so the test drives the backoff without real time', async () => {
      @CommandHandler(ReserveStock, { retry: { attempts: 1 } })
      class Handler {
        handle() {
          throw new Error('out of stock');
        }
      }
      const clock = new ManualClock();
      const deadLetters = new FlakyStore(2);
      let deadLettered = 0;
      const bus = createBus({
        handlers: [Handler],
        deadLetters,
        clock,
        logger: silentLogger,
        hooks: {
          onDeadLettered: () => {
            deadLettered++;
          },
        },
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'a' });

      // The first try failed: the next waits 50 ms of clock time, then 100 ms.
      await waitFor(() => deadLetters.addCalls === 1 && clock.nextTimerAt() !== undefined);
      expect(clock.nextTimerAt()).toBe(clock.now() + 50);
      clock.advance(50);
      await waitFor(() => deadLetters.addCalls === 2 && clock.nextTimerAt() !== undefined);
      expect(clock.nextTimerAt()).toBe(clock.now() + 100);
      clock.advance(100);

      await waitFor(() => deadLettered === 1);
      expect(deadLetters.addCalls).toBe(3);
      expect((await deadLetters.list()).records).toMatchObject([{ reason: 'handler-failed' }]);
      await bus.stop();
    });
  });

  describe('when settleTimeoutMs is beyond what a Node timer can wait', () => {
    it('throws invalid-option naming the largest value, instead of timing out every step at once', () => {
      const broker = new InMemoryBroker();
      const options = {
        broker,
        publisher: new MessagePublisher({ broker }),
        registry: HandlerRegistry.build([], []),
        endpoint: 'e',
        deadLetters: new InMemoryDeadLetterStore(),
        invoke: createContainerInvoker(new Container()),
        logger: silentLogger,
      };
      let thrown: unknown;
      try {
        new Dispatcher({ ...options, settleTimeoutMs: 2 ** 31 });
      } catch (error) {
        thrown = error;
      }
      expect(HarrierError.is(thrown) && thrown.code).toBe('invalid-option');
      expect(String(thrown)).toContain('at most 2147483647');
      expect(() => new Dispatcher({ ...options, settleTimeoutMs: 2 ** 31 - 1 })).not.toThrow();
    });
  });

  describe('when used on its own, without the bus, with an event log', () => {
    it('appends the events a handler published to the log before fanning them out', async () => {
      const Credit = defineCommand('ledger.Credit', { schema: z.object({ account: z.string() }) });
      const Credited = defineEvent('ledger.Credited', {
        schema: z.object({ account: z.string() }),
        topic: 'ledger',
        partitionKey: 'account',
      });
      @CommandHandler(Credit)
      class CreditHandler {
        handle(p: { account: string }, ctx: MessageContext) {
          ctx.publish(Credited, p);
        }
      }
      const broker = new InMemoryBroker();
      const eventLog = new InMemoryEventLog({ topics: [{ name: 'ledger', partitions: 1 }] });
      const deadLetters = new InMemoryDeadLetterStore();
      let handled = 0;
      const dispatcher = new Dispatcher({
        broker,
        publisher: new MessagePublisher({ broker, eventLog }),
        registry: HandlerRegistry.build([CreditHandler], [Credited]),
        endpoint: 'ledger',
        deadLetters,
        invoke: createContainerInvoker(new Container()),
        logger: silentLogger,
        hooks: {
          onHandled: () => {
            handled++;
          },
        },
      });
      await dispatcher.start();
      await new MessagePublisher({ broker }).publish([
        prepareMessage(Credit, { account: 'a' }, {}, { now: Date.now() }).outgoing,
      ]);
      await waitFor(() => handled === 1);
      await dispatcher.stop();

      const [record, ...more] = await eventLog.read('ledger', 0, 0, 10);
      expect(more).toEqual([]);
      expect(record).toMatchObject({ type: 'ledger.Credited', key: 'a' });
      expect(await deadLetters.count()).toBe(0);
    });
  });

  describe('when the dead-letter store hangs', () => {
    it('gives up after its tries, sends the message back, keeps serving, stops in time, and records the dead letter later', async () => {
      const { calls, broker, deadLetters, bus, recordOnceStoreIsBack } = hangingStoreFixture({
        concurrency: 1,
        settleTimeoutMs: 50,
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'bad' });
      for (const id of ['a', 'b', 'c']) await bus.send(ReserveStock, { orderId: id });

      // Concurrency 1: the good messages only get through if the bad one gave its slot back.
      await waitFor(() => ['a', 'b', 'c'].every((id) => calls.includes(id)));
      expect(deadLetters.addCalls).toBeGreaterThanOrEqual(DEAD_LETTER_STORE_TRIES);
      expect(broker.stats().inFlight).toBe(0);
      const started = Date.now();
      await bus.stop({ closeBroker: false, gracePeriodMs: 100 });
      expect(Date.now() - started).toBeLessThan(100 + 2 * 50 + RECEIVER_CLOSE_WAIT_MS);

      // The message went back with a 1 s backoff (jittered): the next process records it.
      const [record] = await recordOnceStoreIsBack();
      expect(record).toMatchObject({ reason: 'handler-failed', handler: 'Handler', attemptCount: 1 });
      expect(calls.filter((id) => id === 'bad')).toHaveLength(1);
    });
  });

  describe('when the bus stops while a decided dead letter is still being stored', () => {
    it('sends the message back with the decision, so the next process records it without running the handler', async () => {
      const { calls, deadLetters, bus, recordOnceStoreIsBack } = hangingStoreFixture({
        settleTimeoutMs: 5_000,
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'bad' });
      await waitFor(() => deadLetters.addCalls === 1);

      await bus.stop({ closeBroker: false, gracePeriodMs: 10 });

      await recordOnceStoreIsBack();
      expect(calls).toEqual(['bad']);
    });
  });

  describe('when the broker rejects acks', () => {
    it('logs and retries the ack, and keeps handling later messages', async () => {
      const handled: string[] = [];
      @CommandHandler(ReserveStock)
      class Handler {
        handle(p: { orderId: string }) {
          handled.push(p.orderId);
        }
      }
      const broker = new FlakyBroker(2);
      const logger = recordingLogger();
      const bus: MessageBus = createBus({ broker, handlers: [Handler], logger });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'a' });
      await bus.send(ReserveStock, { orderId: 'b' });
      await waitFor(
        () => handled.length === 2 && broker.stats().inFlight === 0 && broker.stats().ready === 0,
      );
      expect(handled.sort()).toEqual(['a', 'b']);
      expect(broker.ackCalls).toBe(4);
      expect(logger.errors.filter((e) => e.message.startsWith('ack failed; retrying'))).toHaveLength(2);
      await bus.stop();
    });
  });

  describe('when a handler rejects with something that is not an Error', () => {
    it('dead-letters it with a readable error and never crashes the process', async () => {
      @CommandHandler(ReserveStock, { retry: { attempts: 1 } })
      class Handler {
        handle(): Promise<void> {
          // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
          return Promise.reject({ status: 503 });
        }
      }
      const deadLetters = new InMemoryDeadLetterStore();
      let deadLettered = 0;
      const bus = createBus({
        handlers: [Handler],
        deadLetters,
        logger: silentLogger,
        clock: new ManualClock(),
        hooks: {
          onDeadLettered: () => {
            deadLettered++;
          },
        },
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'a' });
      await waitFor(() => deadLettered === 1);
      const [record] = (await deadLetters.list()).records;
      expect(record?.error).toMatchObject({ name: 'NonError', message: '{"status":503}' });
      await bus.stop();
    });
  });

  describe('when stop() begins as the receiver hands a delivery over', () => {
    it('sends that delivery back to its queue instead of handling it after the stop, before stop() resolves', async () => {
      const handled: string[] = [];
      @CommandHandler(ReserveStock)
      class Handler {
        handle(p: { orderId: string }) {
          handled.push(p.orderId);
        }
      }
      let stopping: Promise<void> | undefined;
      /** Calls `bus.stop()` once a delivery is taken, before the dispatcher sees it. */
      class StopOnTakeBroker extends InMemoryBroker {
        override receiver(options: Parameters<InMemoryBroker['receiver']>[0]): AsyncIterable<Delivery> {
          const inner = super.receiver(options)[Symbol.asyncIterator]();
          const iterator: AsyncIterableIterator<Delivery> = {
            next: async () => {
              const result = await inner.next();
              if (result.done !== true && stopping === undefined) stopping = bus.stop();
              return result;
            },
            return: () => inner.return?.() ?? Promise.resolve({ done: true, value: undefined }),
            [Symbol.asyncIterator]: () => iterator,
          };
          return iterator;
        }
      }
      const broker = new StopOnTakeBroker();
      const bus = createBus({ broker, handlers: [Handler], logger: silentLogger });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'o-1' });
      await waitFor(() => stopping !== undefined);
      await stopping;
      // Back in its queue, ready for the next process (the stopped bus closed this broker).
      expect(handled).toEqual([]);
      expect(broker.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    });
  });

  describe('when restarted after a stop that gave up waiting for its receiver to close', () => {
    it('ends the old receive loop once its receiver wakes, so one loop takes deliveries and concurrency holds', async () => {
      let running = 0;
      let peak = 0;
      let done = 0;
      let blocked = false;
      @CommandHandler(ReserveStock)
      class Handler {
        async handle(_p: { orderId: string }, ctx: MessageContext) {
          running++;
          peak = Math.max(peak, running);
          try {
            if (!blocked) {
              // The first delivery holds the only slot until stop() releases it, so the receive
              // loop is waiting for a slot, not for the receiver, when the stop comes.
              blocked = true;
              await new Promise<void>((resolve) => {
                ctx.signal.addEventListener('abort', () => {
                  resolve();
                });
              });
              return;
            }
            await new Promise((r) => setTimeout(r, 5));
            done++;
          } finally {
            running--;
          }
        }
      }
      let receivers = 0;
      let registrations = 0;
      let wake: (() => void) | undefined;
      /**
       * The first receiver's `return()` hangs until `wake()`, which the second `register` calls (the
       * restart's), letting the old loop run on while the restart has not begun its own loop yet.
       */
      class HangingCloseBroker extends InMemoryBroker {
        override async register(...args: Parameters<InMemoryBroker['register']>): Promise<void> {
          if (registrations++ === 1) {
            wake?.();
            await new Promise((r) => setImmediate(r));
          }
          return super.register(...args);
        }
        override receiver(options: Parameters<InMemoryBroker['receiver']>[0]): AsyncIterable<Delivery> {
          const inner = super.receiver(options)[Symbol.asyncIterator]();
          const hangs = receivers++ === 0;
          const iterator: AsyncIterableIterator<Delivery> = {
            next: () => inner.next(),
            return: async () => {
              if (hangs) await new Promise<void>((resolve) => (wake = resolve));
              return inner.return?.() ?? { done: true, value: undefined };
            },
            [Symbol.asyncIterator]: () => iterator,
          };
          return iterator;
        }
      }
      const broker = new HangingCloseBroker();
      const dispatcher = new Dispatcher({
        broker,
        publisher: new MessagePublisher({ broker }),
        registry: HandlerRegistry.build([Handler], []),
        endpoint: 'stock',
        deadLetters: new InMemoryDeadLetterStore(),
        invoke: createContainerInvoker(new Container()),
        logger: silentLogger,
        concurrency: 1,
      });
      const publisher = new MessagePublisher({ broker });
      const send = (orderId: string) =>
        publisher.publish([prepareMessage(ReserveStock, { orderId }, {}, { now: Date.now() }).outgoing]);
      await dispatcher.start();
      await send('first');
      await waitFor(() => running === 1);
      // Releases the first delivery after 10 ms, then gives up on the hanging receiver after
      // RECEIVER_CLOSE_WAIT_MS.
      await dispatcher.stop({ gracePeriodMs: 10 });
      await dispatcher.start();
      expect(receivers).toBe(2);
      for (let i = 0; i < 10; i++) await send(`o${i}`);
      await waitFor(() => done === 11);
      expect(peak).toBe(1);
      expect(receivers).toBe(2);
      await dispatcher.stop();
    }, 15_000);
  });

  describe('when concurrency is 2', () => {
    it('never runs more than 2 handlers at once', async () => {
      let running = 0;
      let peak = 0;
      let done = 0;
      @CommandHandler(ReserveStock)
      class Handler {
        async handle() {
          running++;
          peak = Math.max(peak, running);
          await new Promise((r) => setImmediate(r));
          running--;
          done++;
        }
      }
      const bus = createBus({ handlers: [Handler], concurrency: 2, logger: silentLogger });
      await bus.start();
      for (let i = 0; i < 20; i++) await bus.send(ReserveStock, { orderId: `o${i}` });
      await waitFor(() => done === 20);
      expect(peak).toBe(2);
      await bus.stop();
    });
  });
});
