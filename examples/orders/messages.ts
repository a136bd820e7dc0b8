/**
 * The messages of the orders service. Each definition's `type` string is its stable wire identity;
 * the zod schema validates the payload on send and again on receive, and gives the payload its type.
 */
import { z } from 'zod';
import { defineCommand, defineEvent, defineQuery } from '../../src/index.js';

const orderId = z.string().regex(/^o-\d+$/, 'expected an order id such as o-1001');

/** How the customer pays: a card is charged at once; a bank transfer waits for the customer. */
const paymentMethod = z.enum(['card', 'bank-transfer']);

const orderLine = z.object({
  sku: z.string().min(1),
  quantity: z.number().int().positive(),
  unitPriceCents: z.number().int().nonnegative(),
});

/** Place an order. Keyed and ordered by order id: messages of one order are handled one at a time. */
export const PlaceOrder = defineCommand('orders.PlaceOrder', {
  schema: z.object({
    orderId,
    customer: z.string().min(1),
    lines: z.array(orderLine).min(1),
    payment: paymentMethod.default('card'),
  }),
  partitionKey: 'orderId',
  ordered: true,
});

/** An order was accepted. Four subscriptions react to it, each on its own. */
export const OrderPlaced = defineEvent('orders.OrderPlaced', {
  schema: z.object({
    orderId,
    customer: z.string(),
    lines: z.array(orderLine),
    totalCents: z.number().int().nonnegative(),
    payment: paymentMethod,
  }),
  partitionKey: 'orderId',
  ordered: true,
});

/** Reserve the stock of an order's lines. */
export const ReserveStock = defineCommand('orders.ReserveStock', {
  schema: z.object({ orderId, lines: z.array(orderLine) }),
  partitionKey: 'orderId',
  ordered: true,
});

/** The stock of an order was reserved. */
export const StockReserved = defineEvent('orders.StockReserved', {
  schema: z.object({ orderId, reservationId: z.string() }),
  partitionKey: 'orderId',
  ordered: true,
});

/** An order was paid. */
export const PaymentCharged = defineEvent('orders.PaymentCharged', {
  schema: z.object({ orderId, paymentId: z.string(), amountCents: z.number().int().nonnegative() }),
  partitionKey: 'orderId',
  ordered: true,
});

/** Ship a paid order whose stock is reserved; sent by the fulfilment saga. */
export const ShipOrder = defineCommand('orders.ShipOrder', {
  schema: z.object({ orderId, reservationId: z.string(), paymentId: z.string() }),
  partitionKey: 'orderId',
  ordered: true,
});

/** Give back the stock reserved for an order; sent by the fulfilment saga when it cancels one. */
export const ReleaseStock = defineCommand('orders.ReleaseStock', {
  schema: z.object({ orderId }),
  partitionKey: 'orderId',
  ordered: true,
});

/** An order was not paid in time and will not ship. */
export const OrderCancelled = defineEvent('orders.OrderCancelled', {
  schema: z.object({ orderId, reason: z.string() }),
  partitionKey: 'orderId',
  ordered: true,
});

/**
 * The fulfilment saga's timeout: the order's payment is due. A command, so it goes to the saga
 * alone; it carries the saga id, so the saga needs no correlation for it.
 */
export const PaymentDue = defineCommand('orders.PaymentDue', {
  schema: z.object({ orderId }),
  partitionKey: 'orderId',
});

/** One row of the order-summary read model. */
export const orderSummarySchema = z.object({
  orderId: z.string(),
  customer: z.string(),
  items: z.number().int(),
  totalCents: z.number().int(),
  reservationId: z.string().optional(),
  paymentId: z.string().optional(),
});

/** A row of the order-summary read model. */
export type OrderSummary = z.output<typeof orderSummarySchema>;

/** Read the order summaries; answered in-process by `bus.execute`. */
export const ListOrderSummaries = defineQuery('orders.ListOrderSummaries', {
  schema: z.object({}),
  result: z.array(orderSummarySchema),
});
