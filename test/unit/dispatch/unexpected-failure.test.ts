import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
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

describe('A failure of the dispatcher itself', () => {
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
    const broker = new InMemoryBroker();
    bus = createBus({
      broker,
      handlers: [ReserveStockHandler],
      // The retry decision logs a warning: a logger that throws there fails the dispatcher itself.
      logger: {
        ...silentLogger,
        warn: () => {
          throw new Error('log sink full');
        },
        error: (message) => void errors.push(message),
      },
    });
    await bus.start();
    await bus.send(ReserveStock, { orderId: 'a' });
    await waitFor('the redelivery handled', () => calls === 2 && broker.stats().inFlight === 0, {
      timeoutMs: 10_000,
      explain: () => `calls ${calls}, broker ${JSON.stringify(broker.stats())}, errors ${errors.join('; ')}`,
    });

    expect(errors).toContain('Unexpected dispatcher failure; the delivery goes back to its queue');
    expect(broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
    expect(await bus.deadLetters.count()).toBe(0);
  });
});
