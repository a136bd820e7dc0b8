import { describe, expect, it } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  createBus,
  silentLogger,
  type BusOptions,
  type MessageBus,
  type MessageContext,
} from '../../../src/index.js';
import { expectCode, failureOf } from '../../../src/testing/expect-code.js';
import { ReserveStock } from '../bus/fixtures.js';

const ENDPOINT = 'stock';

/**
 * A stock endpoint on an in-memory broker, and a way to end deliveries of its commands unsettled
 * before the bus starts, as workers that died holding them would have.
 */
async function crashedBefore(ends: number, options: Partial<BusOptions> = {}) {
  const attempts: number[] = [];
  @CommandHandler(ReserveStock)
  class Handler {
    handle(_payload: unknown, context: MessageContext) {
      attempts.push(context.attempt);
    }
  }
  const broker = new InMemoryBroker();
  let deadLettered = 0;
  const bus: MessageBus = createBus({
    endpoint: ENDPOINT,
    broker,
    handlers: [Handler],
    logger: silentLogger,
    hooks: {
      onDeadLettered: () => {
        deadLettered++;
      },
    },
    ...options,
  });
  await broker.register(ENDPOINT, [{ handler: 'Handler', kind: 'command', types: [ReserveStock.type] }]);
  const id = await bus.send(ReserveStock, { orderId: 'poison' });
  const stop = new AbortController();
  const deliveries = broker.receiver({ endpoint: ENDPOINT, signal: stop.signal })[Symbol.asyncIterator]();
  for (let end = 0; end < ends; end++) {
    const taken = await deliveries.next();
    if (taken.done === true) throw new Error('the receiver ended');
    broker.abandon(taken.value.id);
  }
  stop.abort();
  await bus.start();
  await waitFor(() => deadLettered > 0 || attempts.length > 0);
  return { bus, id, attempts };
}

function waitFor(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
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

describe('Dispatcher', () => {
  describe('crashLimit', () => {
    describe('when deliveries of a message ended unsettled as many times as the default limit, 3', () => {
      it('dead-letters its next delivery as worker-crashed without running the handler', async () => {
        const { bus, id, attempts } = await crashedBefore(3);
        try {
          expect(attempts).toEqual([]);
          const [record] = (await bus.deadLetters.list()).records;
          expect(record).toMatchObject({
            messageId: id,
            handler: 'Handler',
            reason: 'worker-crashed',
            attemptCount: 4,
            error: { name: 'WorkerCrashedError', code: 'worker-crashed' },
          });
          expect(record?.error.message).toContain('3 times');
          expect(record?.error.message).toContain('crashLimit is 3');
        } finally {
          await bus.stop();
        }
      });
    });

    describe('when they ended unsettled fewer times than the limit', () => {
      it('runs the handler, the ends counted as attempts', async () => {
        const { bus, attempts } = await crashedBefore(2);
        try {
          expect(attempts).toEqual([3]);
          expect(await bus.deadLetters.count()).toBe(0);
        } finally {
          await bus.stop();
        }
      });
    });

    describe('when the last attempt the retry policy allows ended unsettled, below the limit', () => {
      it('dead-letters the next delivery as worker-crashed, naming the attempts', async () => {
        const { bus, attempts } = await crashedBefore(2, { crashLimit: 10, retry: { attempts: 2 } });
        try {
          expect(attempts).toEqual([]);
          const [record] = (await bus.deadLetters.list()).records;
          expect(record).toMatchObject({
            reason: 'worker-crashed',
            attemptCount: 3,
            error: { name: 'WorkerCrashedError', code: 'worker-crashed' },
          });
          expect(record?.error.message).toContain('Attempt 3 of at most 2');
        } finally {
          await bus.stop();
        }
      });
    });

    describe('when set to 1', () => {
      it('dead-letters the message after one unsettled end', async () => {
        const { bus, attempts } = await crashedBefore(1, { crashLimit: 1 });
        try {
          expect(attempts).toEqual([]);
          expect((await bus.deadLetters.list()).records[0]).toMatchObject({
            reason: 'worker-crashed',
            attemptCount: 2,
          });
        } finally {
          await bus.stop();
        }
      });
    });

    describe('when it is not a whole number of at least 1', () => {
      it.each([0, -1, 1.5, Number.NaN])(
        'refuses %s with invalid-option naming the option and the fix',
        async (value) => {
          const error = await failureOf(() =>
            Promise.resolve().then(() => createBus({ crashLimit: value, logger: silentLogger })),
          );
          expectCode(error, 'invalid-option');
          expect((error as Error).message).toMatch(/^crashLimit is .*: use a whole number of at least 1/);
        },
      );
    });
  });
});
