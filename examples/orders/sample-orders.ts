import type { InputOf } from '../../src/index.js';
import type { PlaceOrder } from './messages.js';

/**
 * The orders both example programs place. With the failures below, each shows one path of the
 * fulfilment saga:
 * - o-1001: the warehouse is busy twice, so the payment is in before the stock is reserved;
 * - o-1002: the payment gateway times out twice, so the stock is reserved before the payment;
 * - o-1003: paid by bank transfer, which never comes: the saga cancels it when the payment is due.
 */
export const ORDERS: InputOf<typeof PlaceOrder>[] = [
  {
    orderId: 'o-1001',
    customer: 'Ada',
    lines: [
      { sku: 'notebook', quantity: 2, unitPriceCents: 450 },
      { sku: 'pencil', quantity: 10, unitPriceCents: 80 },
    ],
  },
  { orderId: 'o-1002', customer: 'Grace', lines: [{ sku: 'keyboard', quantity: 1, unitPriceCents: 8900 }] },
  {
    orderId: 'o-1003',
    customer: 'Linus',
    lines: [
      { sku: 'mug', quantity: 1, unitPriceCents: 1200 },
      { sku: 'coffee', quantity: 3, unitPriceCents: 990 },
    ],
    payment: 'bank-transfer',
  },
];

/** How many times the payment gateway times out per order, in every process. */
export const GATEWAY_TIMEOUTS = { 'o-1002': 2 };

/** How many times the warehouse is busy per order, in every process. */
export const WAREHOUSE_BUSY = { 'o-1001': 2 };

/**
 * How long an order may wait for its payment in the example: 2 seconds stand in for production's
 * 15 minutes, so the unpaid order is cancelled while you watch.
 */
export const EXAMPLE_PAYMENT_DUE_MS = 2_000;

/**
 * Deliveries the orders cause before the system is quiet. Handled, for every order: PlaceOrder,
 * ReserveStockOnOrderPlaced, ReserveStock, ChargePayment, the OrderSummary projection of
 * OrderPlaced and StockReserved, and the fulfilment saga's steps on OrderPlaced, StockReserved and
 * PaymentDue (9); for a paid order also the projection and the saga step of PaymentCharged and
 * ShipOrder (3 more); for a cancelled one ReleaseStock (1 more). Dead-lettered: NotifyLegacyCrm of
 * every order.
 */
export function expectedDeliveries(orders: readonly InputOf<typeof PlaceOrder>[]): {
  readonly handled: number;
  readonly deadLettered: number;
} {
  const paid = orders.filter((order) => (order.payment ?? 'card') === 'card').length;
  return { handled: 9 * orders.length + 3 * paid + (orders.length - paid), deadLettered: orders.length };
}

/** Cents as dollars, for the printed story. */
export const dollars = (cents: number): string => `$${(cents / 100).toFixed(2)}`;
