import { z } from 'zod';
import { defineCommand, defineEvent, defineQuery } from '../../../src/index.js';

export const PlaceOrder = defineCommand('test.PlaceOrder', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
  partitionKey: 'orderId',
  result: z.object({ accepted: z.boolean() }),
});
export const OrderPlaced = defineEvent('test.OrderPlaced', {
  schema: z.object({ orderId: z.string(), amount: z.number() }),
  partitionKey: 'orderId',
});
export const ReserveStock = defineCommand('test.ReserveStock', { schema: z.object({ orderId: z.string() }) });
export const GetTotal = defineQuery('test.GetTotal', { schema: z.object({}), result: z.number() });
