import type { InputOf } from '../../src/index.js';
import type { PlaceOrder } from './messages.js';

/** The orders both example programs place. */
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
  },
];

/**
 * Deliveries each order causes before the system is quiet: handled are PlaceOrder,
 * ReserveStockOnOrderPlaced, ReserveStock, ChargePayment and three OrderSummary events
 * (OrderPlaced, StockReserved, PaymentCharged); dead-lettered is NotifyLegacyCrm.
 */
export const PER_ORDER = { handled: 7, deadLettered: 1 };

/** Cents as dollars, for the printed story. */
export const dollars = (cents: number): string => `$${(cents / 100).toFixed(2)}`;
