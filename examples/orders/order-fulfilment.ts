/**
 * The order-fulfilment saga: an order ships once it is both paid and its stock reserved, whichever
 * comes first, and is cancelled when its payment is not in on time.
 */
import { inject, injectable } from 'inversify';
import { z } from 'zod';
import {
  Handles,
  Saga,
  StartedBy,
  sagaStateOf,
  type PayloadOf,
  type SagaContext,
  type SagaInstance,
  type SagaStore,
} from '../../src/index.js';
import {
  OrderCancelled,
  OrderPlaced,
  PaymentCharged,
  PaymentDue,
  ReleaseStock,
  ShipOrder,
  StockReserved,
} from './messages.js';
import { OrdersTokens } from './services.js';

/** The saga's name: its subscription and the key of its instances in the store. */
export const FULFILMENT_SAGA = 'orders.Fulfilment';

/** The saga's state, one instance per order id; every field has a default, so `{}` is a new order. */
export const FulfilmentState = z.object({
  /** What came in, in the order it came. */
  arrived: z.array(z.enum(['paid', 'stock reserved'])).default([]),
  paymentId: z.string().optional(),
  reservationId: z.string().optional(),
  outcome: z.enum(['ready to ship', 'cancelled']).optional(),
});
/** The state of one order's fulfilment. */
export type FulfilmentState = z.output<typeof FulfilmentState>;

/**
 * Ships an order once it is paid and its stock reserved, in whichever order the two events come;
 * cancels it when it is not paid `paymentDueMs` after it was placed.
 *
 * @remarks
 * Each of the three events may start the instance: with competing workers, a `PaymentCharged` can
 * reach the saga before the `OrderPlaced` it followed from. Completing drops the pending
 * `PaymentDue`, so a shipped order is never cancelled. A `StockReserved` that comes after the
 * cancellation meets a completed instance and is ignored (`onCompleted`), so the example's
 * warehouse would keep that reservation; a real one would also refuse to reserve a cancelled order.
 */
@injectable()
@Saga(FULFILMENT_SAGA, { state: FulfilmentState })
export class OrderFulfilment {
  constructor(@inject(OrdersTokens.PaymentDueMs) private readonly paymentDueMs: number) {}

  @StartedBy(OrderPlaced, { correlate: 'orderId' })
  placed(event: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<FulfilmentState>): void {
    ctx.requestTimeout(PaymentDue, this.paymentDueMs, { orderId: event.orderId });
  }

  @StartedBy(PaymentCharged, { correlate: 'orderId' })
  paid(event: PayloadOf<typeof PaymentCharged>, ctx: SagaContext<FulfilmentState>): void {
    ctx.state.paymentId = event.paymentId;
    ctx.state.arrived.push('paid');
    this.#shipWhenReady(ctx);
  }

  @StartedBy(StockReserved, { correlate: 'orderId' })
  stockReserved(event: PayloadOf<typeof StockReserved>, ctx: SagaContext<FulfilmentState>): void {
    ctx.state.reservationId = event.reservationId;
    ctx.state.arrived.push('stock reserved');
    this.#shipWhenReady(ctx);
  }

  @Handles(PaymentDue)
  paymentDue(due: PayloadOf<typeof PaymentDue>, ctx: SagaContext<FulfilmentState>): void {
    // Paid, and only the stock is missing: the order still ships once it is reserved.
    if (ctx.state.paymentId !== undefined) return;
    ctx.publish(OrderCancelled, {
      orderId: due.orderId,
      reason: `not paid in ${duration(this.paymentDueMs)}`,
    });
    ctx.send(ReleaseStock, { orderId: due.orderId });
    ctx.state.outcome = 'cancelled';
    ctx.complete();
  }

  #shipWhenReady(ctx: SagaContext<FulfilmentState>): void {
    const { paymentId, reservationId } = ctx.state;
    if (paymentId === undefined || reservationId === undefined) return;
    ctx.send(ShipOrder, { orderId: ctx.sagaId, reservationId, paymentId });
    ctx.state.outcome = 'ready to ship';
    ctx.complete();
  }
}

/** A delay as people say it: `2 s`, `15 min`. */
const duration = (ms: number): string => (ms >= 60_000 ? `${ms / 60_000} min` : `${ms / 1000} s`);

/**
 * The printed story of every order's fulfilment, one line per stored instance, such as
 * `order o-1001: paid, stock reserved -> ready to ship`, ordered by order id.
 */
export async function fulfilmentLines(store: SagaStore, paymentDueMs: number): Promise<string[]> {
  const { instances } = await store.list({ saga: FULFILMENT_SAGA });
  return instances.map((instance) => describeFulfilment(instance, paymentDueMs));
}

function describeFulfilment(instance: SagaInstance, paymentDueMs: number): string {
  const state = sagaStateOf<FulfilmentState>(instance);
  const steps: string[] = [...state.arrived];
  let outcome: string;
  switch (state.outcome) {
    case 'ready to ship':
      outcome = 'ready to ship';
      break;
    case 'cancelled':
      steps.push(`not paid in ${duration(paymentDueMs)}`);
      outcome = 'cancelled, stock released';
      break;
    case undefined:
      outcome = `still waiting (${instance.status})`;
  }
  return `order ${instance.id}: ${steps.join(', ') || 'placed'} -> ${outcome}`;
}
