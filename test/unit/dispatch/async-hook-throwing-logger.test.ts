import { afterEach, describe, expect, it } from 'vitest';
import { CommandHandler, createBus, silentLogger, type MessageBus } from '../../../src/index.js';
import { waitFor } from '../../helpers/local-redis.js';
import { ReserveStock } from '../bus/fixtures.js';

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

@CommandHandler(ReserveStock)
class ReserveStockHandler {
  handle(): void {
    // Handled.
  }
}

describe('An async hook that rejects, with a logger whose error throws', () => {
  it('leaves no unhandled rejection', async () => {
    let logged = 0;
    let rejected = false;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    // Vitest fails the run on an unhandled rejection too; this listener names it in the test.
    process.on('unhandledRejection', onUnhandled);
    try {
      bus = createBus({
        handlers: [ReserveStockHandler],
        logger: {
          ...silentLogger,
          error: () => {
            logged++;
            throw new Error('log sink full');
          },
        },
        /* eslint-disable @typescript-eslint/no-misused-promises */
        hooks: {
          onHandled: async () => {
            rejected = true;
            return Promise.reject(new Error('metrics down'));
          },
        },
        /* eslint-enable @typescript-eslint/no-misused-promises */
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'a' });
      await waitFor('the hook rejection logged', () => rejected && logged >= 1, { timeoutMs: 5_000 });
      // A rejection nobody handles is reported after the microtasks of its turn: give it two more turns.
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));

      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
