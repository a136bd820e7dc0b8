import { describe, expect, it } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  InMemoryDeadLetterStore,
  silentLogger,
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

/** An in-memory broker that counts its acks and nacks. */
class CountingBroker extends InMemoryBroker {
  acks = 0;
  nacks = 0;
  override ack(id: string): Promise<void> {
    this.acks++;
    return super.ack(id);
  }
  override nack(...args: Parameters<InMemoryBroker['nack']>): Promise<void> {
    this.nacks++;
    return super.nack(...args);
  }
}

interface Seen {
  /** Acks the broker had seen when a microtask queued by the handler ran. */
  acksAtNextMicrotask: number[];
  handled: number;
}

function dispatcherFor(
  broker: CountingBroker,
  handle: (orderId: string) => unknown,
  seen: Seen,
  deadLetters = new InMemoryDeadLetterStore(),
  logger: Logger = silentLogger,
): Dispatcher {
  @CommandHandler(ReserveStock)
  class ReserveStockHandler {
    handle(payload: { orderId: string }): unknown {
      const acks = broker.acks;
      queueMicrotask(() => seen.acksAtNextMicrotask.push(broker.acks - acks));
      return handle(payload.orderId);
    }
  }
  return new Dispatcher({
    broker,
    publisher: new MessagePublisher({ broker }),
    registry: HandlerRegistry.build([ReserveStockHandler], [ReserveStock]),
    endpoint: 'stock',
    deadLetters,
    invoke: plainInvoker,
    concurrency: 1,
    logger,
    retry: { attempts: 2, backoff: { baseMs: 1, maxMs: 1 } },
    hooks: {
      onHandled: () => {
        seen.handled++;
      },
    },
  });
}

const send = (broker: InMemoryBroker, orderId: string): Promise<void> =>
  new MessagePublisher({ broker }).publish([
    prepareMessage(ReserveStock, { orderId }, {}, { now: Date.now() }).outgoing,
  ]);

describe('Dispatcher, a handler that returns a plain value', () => {
  it('acks in the same turn as the handler ran, before any microtask the handler queued', async () => {
    const broker = new CountingBroker();
    const seen: Seen = { acksAtNextMicrotask: [], handled: 0 };
    const dispatcher = dispatcherFor(broker, () => 'done', seen);
    await dispatcher.start();
    await send(broker, 'a');
    await send(broker, 'b');
    await waitFor('both handled', () => seen.handled === 2, { timeoutMs: 5_000 });
    await dispatcher.stop();

    expect(seen.acksAtNextMicrotask).toEqual([1, 1]);
    expect(broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
    expect(dispatcher.activeCount).toBe(0);
  });

  it('acks a handler that returns a promise only once it resolves', async () => {
    const broker = new CountingBroker();
    const seen: Seen = { acksAtNextMicrotask: [], handled: 0 };
    const dispatcher = dispatcherFor(broker, () => Promise.resolve('done'), seen);
    await dispatcher.start();
    await send(broker, 'a');
    await waitFor('handled', () => seen.handled === 1, { timeoutMs: 5_000 });
    await dispatcher.stop();

    expect(seen.acksAtNextMicrotask).toEqual([0]);
    expect(broker.acks).toBe(1);
  });

  it('retries a handler that throws synchronously, then dead-letters it, never acking it', async () => {
    const broker = new CountingBroker();
    const deadLetters = new InMemoryDeadLetterStore();
    const seen: Seen = { acksAtNextMicrotask: [], handled: 0 };
    let calls = 0;
    const dispatcher = dispatcherFor(
      broker,
      () => {
        calls++;
        throw new Error('out of stock');
      },
      seen,
      deadLetters,
    );
    await dispatcher.start();
    await send(broker, 'a');
    await waitFor('a dead letter', async () => (await deadLetters.count()) === 1, { timeoutMs: 5_000 });
    await dispatcher.stop();

    expect(calls).toBe(2);
    expect(broker.acks).toBe(0);
    expect(broker.nacks).toBe(2);
    expect(seen.handled).toBe(0);
    const [record] = (await deadLetters.list()).records;
    expect(record).toMatchObject({ reason: 'handler-failed', error: { message: 'out of stock' } });
  });

  it('retries a handler whose result has a `then` that throws when read, then dead-letters it, as for any handler failure', async () => {
    const broker = new CountingBroker();
    const deadLetters = new InMemoryDeadLetterStore();
    const seen: Seen = { acksAtNextMicrotask: [], handled: 0 };
    const errors: string[] = [];
    let calls = 0;
    const logger: Logger = { ...silentLogger, error: (message) => void errors.push(message) };
    const dispatcher = dispatcherFor(
      broker,
      () => {
        calls++;
        return unreadableThen();
      },
      seen,
      deadLetters,
      logger,
    );
    await dispatcher.start();
    await send(broker, 'a');
    // Either outcome ends the wait: the dead letter, or the delivery given up as a dispatcher bug.
    await waitFor(
      'a dead letter or an unexpected failure',
      async () => (await deadLetters.count()) === 1 || errors.some((m) => m.startsWith('Unexpected')),
      { timeoutMs: 5_000 },
    );
    await dispatcher.stop({ gracePeriodMs: 100 });

    expect(errors.filter((m) => m.startsWith('Unexpected'))).toEqual([]);
    expect(calls).toBe(2);
    expect(broker.acks).toBe(0);
    const [record] = (await deadLetters.list()).records;
    expect(record).toMatchObject({ reason: 'handler-failed', error: { message: 'then is not readable' } });
  });
});
