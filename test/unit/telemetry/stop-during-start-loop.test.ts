import 'reflect-metadata';
import { expect, it } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  createBus,
  silentLogger,
  type PayloadOf,
} from '../../../src/index.js';
import { PlaceOrder } from '../bus/fixtures.js';
import { PlaceOrderHandler } from './fixtures.js';

const takenBy: string[] = [];

@CommandHandler(PlaceOrder)
class LaterConsumer {
  handle(payload: PayloadOf<typeof PlaceOrder>) {
    takenBy.push(`later:${payload.orderId}`);
    return { accepted: true };
  }
}

it('does not receive when stop() was called while start() registered with the broker', async () => {
  const broker = new InMemoryBroker();
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const register = broker.register.bind(broker);
  broker.register = async (endpoint, specs) => {
    await gate;
    return register(endpoint, specs);
  };
  const bus = createBus({ endpoint: 'shop', broker, handlers: [PlaceOrderHandler], logger: silentLogger });
  const starting = bus.start().catch(() => undefined);
  await new Promise((resolve) => setImmediate(resolve));
  const stopping = bus.stop({ closeBroker: false });
  release();
  await Promise.all([starting, stopping]);
  // A later process of the endpoint gets the command: the stopped bus left it in the queue.
  broker.register = register;
  const later = createBus({ endpoint: 'shop', broker, handlers: [LaterConsumer], logger: silentLogger });
  await later.start();
  await later.send(PlaceOrder, { orderId: 'o-9', amount: 1 });
  await expect.poll(() => takenBy).toEqual(['later:o-9']);
  await later.stop();
});
