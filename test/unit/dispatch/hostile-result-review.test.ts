import 'reflect-metadata';
import { describe, expect, it } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  InMemoryDeadLetterStore,
  createBus,
  type Logger,
} from '../../../src/index.js';
import { Dispatcher, HandlerRegistry, MessagePublisher, prepareMessage } from '../../../src/extend.js';
import { waitFor } from '../../helpers/local-redis.js';
import { ReserveStock } from '../bus/fixtures.js';
import { plainInvoker } from './plain-invoker.js';

/** A handler result whose `then` cannot be read: `await` and `Promise.resolve` reject with the error. */
function unreadableThen(): object {
  return Object.defineProperty({}, 'then', {
    get(): never {
      throw new Error('then is not readable');
    },
  });
}

/** A logger that keeps what was logged at error level. */
function recordingLogger(errors: string[]): Logger {
  const ignore = (): void => undefined;
  return {
    debug: ignore,
    info: ignore,
    warn: ignore,
    error: (message: string) => {
      errors.push(message);
    },
  };
}

describe('Dispatcher', () => {
  describe('when a handler returns a value whose `then` throws when read', () => {
    it('retries the delivery and then dead-letters it, as for any handler failure', async () => {
      const broker = new InMemoryBroker();
      const deadLetters = new InMemoryDeadLetterStore();
      const errors: string[] = [];
      let calls = 0;
      @CommandHandler(ReserveStock)
      class ReserveStockHandler {
        handle(): unknown {
          calls++;
          return unreadableThen();
        }
      }
      const dispatcher = new Dispatcher({
        broker,
        publisher: new MessagePublisher({ broker }),
        registry: HandlerRegistry.build([ReserveStockHandler], [ReserveStock]),
        endpoint: 'stock',
        deadLetters,
        invoke: plainInvoker,
        concurrency: 1,
        logger: recordingLogger(errors),
        retry: { attempts: 2, backoff: { baseMs: 1, maxMs: 1 } },
      });
      await dispatcher.start();
      await new MessagePublisher({ broker }).publish([
        prepareMessage(ReserveStock, { orderId: 'a' }, {}, { now: Date.now() }).outgoing,
      ]);
      // Either outcome ends the wait: the dead letter, or the delivery given up as a dispatcher bug.
      await waitFor(
        'a dead letter or an unexpected failure',
        async () => (await deadLetters.count()) === 1 || errors.some((m) => m.startsWith('Unexpected')),
        { timeoutMs: 5_000 },
      );
      await dispatcher.stop({ gracePeriodMs: 100 });

      expect(errors.filter((m) => m.startsWith('Unexpected'))).toEqual([]);
      expect(calls).toBe(2);
      const [record] = (await deadLetters.list()).records;
      expect(record).toMatchObject({ reason: 'handler-failed', error: { message: 'then is not readable' } });
      expect(broker.stats()).toMatchObject({ ready: 0, inFlight: 0 });
    });
  });
});

describe('MessageBus', () => {
  describe('.execute', () => {
    describe('when the handler returns a value whose `then` throws when read', () => {
      it('rejects with that error instead of throwing', async () => {
        @CommandHandler(ReserveStock)
        class ReserveStockHandler {
          handle(): unknown {
            return unreadableThen();
          }
        }
        const bus = createBus({ handlers: [ReserveStockHandler], logger: recordingLogger([]) });
        try {
          let result: Promise<unknown> | undefined;
          expect(() => {
            result = bus.execute(ReserveStock, { orderId: 'a' });
          }).not.toThrow();
          await expect(result).rejects.toThrow('then is not readable');
        } finally {
          await bus.stop({ gracePeriodMs: 100 });
        }
      });
    });
  });
});
