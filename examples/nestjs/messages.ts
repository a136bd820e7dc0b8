import { z } from 'zod';
import { defineCommand, defineEvent, defineQuery } from '../../src/index.js';

/** Place an order: sent by the controller, handled by PlaceOrderHandler. */
export const PlaceOrder = defineCommand('shop.PlaceOrder', {
  schema: z.object({ orderId: z.string().min(1), items: z.array(z.string()).min(1) }),
});

/** An order was placed: published by PlaceOrderHandler once it succeeds. */
export const OrderPlaced = defineEvent('shop.OrderPlaced', {
  schema: z.object({ orderId: z.string(), total: z.number() }),
});

/** The order book's entry of one order, answered in-process. */
export const GetOrder = defineQuery('shop.GetOrder', {
  schema: z.object({ orderId: z.string() }),
  result: z.object({ orderId: z.string(), total: z.number(), confirmedBy: z.string().optional() }).nullable(),
});
