import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  ManualClock,
  createBus,
  silentLogger,
  type Logger,
  type MessageBus,
} from '../../../src/index.js';
import { waitFor } from '../../helpers/local-redis.js';
import { ReserveStock } from '../bus/fixtures.js';

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

/**
 * A logger whose `warn` throws (the retry decision and "Message dead-lettered" log one, so it fails
 * the dispatcher itself there), recording the messages of `error`.
 */
function throwingWarnLogger(errors: string[]): Logger {
  return {
    ...silentLogger,
    warn: () => {
      throw new Error('log sink full');
    },
    error: (message) => void errors.push(message),
  };
}

const UNEXPECTED = 'Unexpected dispatcher failure; the delivery goes back to its queue';

describe('Dispatcher', () => {
  describe('when it fails itself (a logger whose warn throws)', () => {
    it('sends the delivery back to its queue with backoff instead of holding it unsettled', async () => {
      let calls = 0;
      @CommandHandler(ReserveStock, { retry: { attempts: 3, backoff: { baseMs: 1, maxMs: 1 } } })
      class ReserveStockHandler {
        handle(): void {
          calls++;
          if (calls === 1) throw new Error('out of stock');
        }
      }
      const errors: string[] = [];
      const clock = new ManualClock();
      const broker = new InMemoryBroker({ clock });
      bus = createBus({ broker, clock, handlers: [ReserveStockHandler], logger: throwingWarnLogger(errors) });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'a' });
      await waitFor(
        'the delivery sent back',
        () => errors.includes(UNEXPECTED) && broker.stats().waiting === 1,
        {
          timeoutMs: 10_000,
          explain: () =>
            `calls ${calls}, broker ${JSON.stringify(broker.stats())}, errors ${errors.join('; ')}`,
        },
      );
      // Back in its queue, waiting for its backoff: not redelivered until the clock reaches it.
      expect(broker.stats()).toMatchObject({ ready: 0, inFlight: 0 });
      expect(calls).toBe(1);

      const next = clock.nextTimerAt();
      if (next !== undefined) clock.advanceTo(next);
      await waitFor('the redelivery handled', () => calls === 2 && broker.stats().inFlight === 0, {
        timeoutMs: 10_000,
        explain: () => `calls ${calls}, broker ${JSON.stringify(broker.stats())}`,
      });
      expect(broker.stats()).toMatchObject({ ready: 0, waiting: 0 });
      expect(await bus.deadLetters.count()).toBe(0);
    });

    it('still dead-letters a handler that always fails once its attempts are spent, instead of sending it back forever', async () => {
      let calls = 0;
      @CommandHandler(ReserveStock, { retry: { attempts: 2, backoff: { baseMs: 1, maxMs: 1 } } })
      class ReserveStockHandler {
        handle(): void {
          calls++;
          throw new Error('out of stock');
        }
      }
      const errors: string[] = [];
      const unexpected = (): number => errors.filter((message) => message === UNEXPECTED).length;
      const clock = new ManualClock();
      const broker = new InMemoryBroker({ clock });
      bus = createBus({ broker, clock, handlers: [ReserveStockHandler], logger: throwingWarnLogger(errors) });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'a' });
      const deadLetters = bus.deadLetters;
      let count = 0;
      // Moves the clock on for every backoff; a delivery that comes back forever fails the dispatcher
      // well past its two attempts.
      await waitFor(
        'dead-lettered, or sent back well past its attempts',
        async () => {
          count = await deadLetters.count();
          if (count > 0 || unexpected() > 6) return true;
          const next = clock.nextTimerAt();
          if (next !== undefined) clock.advanceTo(next);
          return false;
        },
        {
          timeoutMs: 10_000,
          explain: () =>
            `calls ${calls}, unexpected ${unexpected()}, broker ${JSON.stringify(broker.stats())}`,
        },
      );
      expect(count).toBe(1);
      expect(calls).toBe(2);
      expect(unexpected()).toBe(1);
    });
  });
});
