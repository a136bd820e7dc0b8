import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  createBus,
  silentLogger,
  type LogFields,
  type MessageBus,
} from '../../../src/index.js';
import { waitFor } from '../../helpers/local-redis.js';
import { ReserveStock } from '../bus/fixtures.js';

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

@CommandHandler(ReserveStock, { retry: { attempts: 2, backoff: { baseMs: 1, maxMs: 1 } } })
class ReserveStockHandler {
  handle(payload: { orderId: string }): void {
    if (payload.orderId === 'bad') throw new Error('out of stock');
  }
}

/**
 * Runs `body` with a listener that records unhandled rejections (Vitest fails the run on one too;
 * this names it in the test), then returns what it recorded. A rejection nobody handles is reported
 * after the microtasks of its turn, so two more turns pass before the listener goes: there is no
 * condition to wait for when what is checked is that something does not happen.
 */
async function unhandledRejectionsDuring(body: () => Promise<void>): Promise<unknown[]> {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => {
    unhandled.push(reason);
  };
  process.on('unhandledRejection', onUnhandled);
  try {
    await body();
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  return unhandled;
}

describe('Dispatch hooks that are async functions', () => {
  it('logs the rejection of onHandled, onRetrying and onDeadLettered instead of leaving it unhandled', async () => {
    const errors: { message: string; fields: LogFields | undefined }[] = [];
    const unhandled = await unhandledRejectionsDuring(async () => {
      bus = createBus({
        handlers: [ReserveStockHandler],
        logger: { ...silentLogger, error: (message, fields) => void errors.push({ message, fields }) },
        // TypeScript accepts an async function for a hook typed `void` (this lint rule does not, which
        // is why a user without it can pass one): its rejection must not become an unhandled one.
        /* eslint-disable @typescript-eslint/no-misused-promises */
        hooks: {
          onHandled: async () => Promise.reject(new Error('metrics down (handled)')),
          onRetrying: async () => Promise.reject(new Error('metrics down (retrying)')),
          onDeadLettered: async () => Promise.reject(new Error('metrics down (dead-lettered)')),
        },
        /* eslint-enable @typescript-eslint/no-misused-promises */
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'good' });
      await bus.send(ReserveStock, { orderId: 'bad' });
      await waitFor('three hook rejections logged', () => errors.length >= 3, { timeoutMs: 5_000 });
    });

    expect(errors.map((e) => e.message).sort()).toEqual([
      'Hook onDeadLettered rejected; ignored',
      'Hook onHandled rejected; ignored',
      'Hook onRetrying rejected; ignored',
    ]);
    expect(errors.find((e) => e.message.includes('onHandled'))?.fields).toMatchObject({
      error: {
        message: 'metrics down (handled)',
      },
    });
    expect(unhandled).toEqual([]);
  });

  describe('with a logger whose error throws', () => {
    it('leaves no unhandled rejection', async () => {
      let logged = 0;
      let rejected = false;
      const unhandled = await unhandledRejectionsDuring(async () => {
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
        await bus.send(ReserveStock, { orderId: 'good' });
        await waitFor('the hook rejection logged', () => rejected && logged >= 1, { timeoutMs: 5_000 });
      });

      expect(unhandled).toEqual([]);
    });
  });
});
