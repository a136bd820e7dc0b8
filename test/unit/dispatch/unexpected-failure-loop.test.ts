import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  ManualClock,
  createBus,
  silentLogger,
  type MessageBus,
} from '../../../src/index.js';
import { waitFor } from '../../helpers/local-redis.js';
import { ReserveStock } from '../bus/fixtures.js';

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

describe('A logger whose warn throws', () => {
  it('still dead-letters a handler that always fails once its attempts are spent, instead of sending it back forever', async () => {
    let calls = 0;
    let unexpected = 0;
    @CommandHandler(ReserveStock, { retry: { attempts: 2, backoff: { baseMs: 1, maxMs: 1 } } })
    class ReserveStockHandler {
      handle(): void {
        calls++;
        throw new Error('out of stock');
      }
    }
    const clock = new ManualClock();
    const broker = new InMemoryBroker({ clock });
    bus = createBus({
      broker,
      clock,
      handlers: [ReserveStockHandler],
      // Both the retry decision and "Message dead-lettered" log a warning.
      logger: {
        ...silentLogger,
        error: (message) => {
          if (message.startsWith('Unexpected dispatcher failure')) unexpected++;
        },
        warn: () => {
          throw new Error('log sink full');
        },
      },
    });
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
        if (count > 0 || unexpected > 6) return true;
        const next = clock.nextTimerAt();
        if (next !== undefined) clock.advanceTo(next);
        return false;
      },
      {
        timeoutMs: 10_000,
        explain: () => `calls ${calls}, unexpected ${unexpected}, broker ${JSON.stringify(broker.stats())}`,
      },
    );
    expect(count).toBe(1);
    expect(calls).toBe(2);
    expect(unexpected).toBe(1);
  });
});
