// examples/readme/redis-main.ts
import { createBus } from 'harrier';
import { BullMqBroker, RedisDeadLetterStore } from 'harrier/redis';
import { PlaceOrder, PlaceOrderHandler, SendConfirmation } from './orders.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const bus = createBus({
  endpoint: 'orders',
  handlers: [PlaceOrderHandler, SendConfirmation],
  broker: new BullMqBroker({ connection: url }),
  deadLetters: new RedisDeadLetterStore({ connection: url }),
});
await bus.start();
await bus.send(PlaceOrder, { orderId: 'o-1', total: 42 });

process.once('SIGTERM', () => void bus.stop());
