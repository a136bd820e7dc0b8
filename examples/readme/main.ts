// examples/readme/main.ts
import { createBus } from 'harrier';
import { PlaceOrder, PlaceOrderHandler, SendConfirmation } from './orders.js';

const bus = createBus({ endpoint: 'orders', handlers: [PlaceOrderHandler, SendConfirmation] });
await bus.start();
await bus.send(PlaceOrder, { orderId: 'o-1', total: 42 });

// On shutdown, let in-flight handlers finish and close the broker's connections.
process.once('SIGTERM', () => void bus.stop());
