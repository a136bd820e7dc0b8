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

describe('A verify option that throws', () => {
  it('dead-letters the message as signature-invalid with what it threw, and settles the delivery', async () => {
    let calls = 0;
    @CommandHandler(ReserveStock)
    class ReserveStockHandler {
      handle(): void {
        calls++;
      }
    }
    const broker = new InMemoryBroker();
    bus = createBus({
      broker,
      handlers: [ReserveStockHandler],
      logger: silentLogger,
      verify: () => {
        throw new Error('key store down');
      },
    });
    await bus.start();
    await bus.send(ReserveStock, { orderId: 'a' });
    const store = bus.deadLetters;
    await waitFor('a dead letter', async () => (await store.count()) === 1, { timeoutMs: 5_000 });

    const [record] = (await store.list()).records;
    expect(record).toMatchObject({
      reason: 'signature-invalid',
      error: { message: 'the signature could not be checked: the verifier threw key store down' },
    });
    expect(calls).toBe(0);
    await waitFor('the delivery settled', () => broker.stats().inFlight === 0, { timeoutMs: 5_000 });
    expect(broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
  });
});
