/**
 * The order-summary read model: a store kept in an inversify singleton, the projection that feeds
 * it from events, and the query handler that reads it.
 */
import { inject, injectable } from 'inversify';
import { On, Projection, QueryHandler, type HandlesQuery, type PayloadOf } from '../../src/index.js';
import {
  ListOrderSummaries,
  OrderPlaced,
  PaymentCharged,
  StockReserved,
  type OrderSummary,
} from './messages.js';

/** The read model: one summary per order, in memory. */
@injectable()
export class OrderSummaryStore {
  readonly #rows = new Map<string, OrderSummary>();

  /** Merges `changes` into the order's row. Setting fields (never adding) keeps redeliveries harmless. */
  upsert(orderId: string, changes: Partial<OrderSummary>): void {
    const row = this.#rows.get(orderId) ?? { orderId, customer: '', items: 0, totalCents: 0 };
    this.#rows.set(orderId, { ...row, ...changes });
  }

  all(): OrderSummary[] {
    return [...this.#rows.values()].sort((a, b) => a.orderId.localeCompare(b.orderId));
  }
}

/** Keeps {@link OrderSummaryStore} up to date; each `@On` method handles one event type. */
@injectable()
@Projection('OrderSummary')
export class OrderSummaryProjection {
  constructor(@inject(OrderSummaryStore) private readonly store: OrderSummaryStore) {}

  @On(OrderPlaced)
  placed(event: PayloadOf<typeof OrderPlaced>): void {
    const items = event.lines.reduce((sum, line) => sum + line.quantity, 0);
    this.store.upsert(event.orderId, { customer: event.customer, items, totalCents: event.totalCents });
  }

  @On(StockReserved)
  stockReserved(event: PayloadOf<typeof StockReserved>): void {
    this.store.upsert(event.orderId, { reservationId: event.reservationId });
  }

  @On(PaymentCharged)
  paymentCharged(event: PayloadOf<typeof PaymentCharged>): void {
    this.store.upsert(event.orderId, { paymentId: event.paymentId });
  }
}

/** Answers {@link ListOrderSummaries} from the read model. */
@injectable()
@QueryHandler(ListOrderSummaries)
export class ListOrderSummariesHandler implements HandlesQuery<typeof ListOrderSummaries> {
  constructor(@inject(OrderSummaryStore) private readonly store: OrderSummaryStore) {}

  handle(): OrderSummary[] {
    return this.store.all();
  }
}
