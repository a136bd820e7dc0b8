// examples/readme/orders.ts
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  defineCommand,
  defineEvent,
  type HandlesCommand,
  type HandlesEvent,
  type MessageContext,
  type PayloadOf,
} from 'harrier';

export const PlaceOrder = defineCommand('orders.PlaceOrder', {
  schema: z.object({ orderId: z.string(), total: z.number().positive() }),
  partitionKey: 'orderId',
});
export const OrderPlaced = defineEvent('orders.OrderPlaced', {
  schema: z.object({ orderId: z.string(), total: z.number() }),
});

@CommandHandler(PlaceOrder)
export class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(order: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    ctx.publish(OrderPlaced, order); // published only if this handler succeeds
  }
}

@EventHandler(OrderPlaced, { retry: { attempts: 3 } })
export class SendConfirmation implements HandlesEvent<typeof OrderPlaced> {
  async handle(event: PayloadOf<typeof OrderPlaced>): Promise<void> {
    console.log(`Order ${event.orderId} placed, total ${event.total}`);
  }
}
