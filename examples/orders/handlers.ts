/**
 * The command and event handlers of the orders service. Each class is resolved from the inversify
 * container, one instance per message, with its dependencies injected by explicit tokens.
 */
import { inject, injectable } from 'inversify';
import {
  CommandHandler,
  EventHandler,
  type HandlesCommand,
  type HandlesEvent,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import {
  OrderPlaced,
  PaymentCharged,
  PlaceOrder,
  ReleaseStock,
  ReserveStock,
  ShipOrder,
  StockReserved,
} from './messages.js';
import { Inventory, OrdersTokens, type LegacyCrm, type PaymentGateway } from './services.js';

/** Accepts an order and records `OrderPlaced`, published only once this handler succeeds. */
@CommandHandler(PlaceOrder)
export class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(order: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    const totalCents = order.lines.reduce((sum, line) => sum + line.quantity * line.unitPriceCents, 0);
    ctx.publish(OrderPlaced, {
      orderId: order.orderId,
      customer: order.customer,
      lines: order.lines,
      totalCents,
      payment: order.payment,
    });
  }
}

/** Reacts to `OrderPlaced` by sending `ReserveStock` to its one handler, wherever it runs. */
@EventHandler(OrderPlaced, { name: 'ReserveStockOnOrderPlaced' })
export class ReserveStockOnOrderPlaced implements HandlesEvent<typeof OrderPlaced> {
  handle(event: PayloadOf<typeof OrderPlaced>, ctx: MessageContext): void {
    ctx.send(ReserveStock, { orderId: event.orderId, lines: event.lines });
  }
}

/** Reserves stock and records `StockReserved`. */
@injectable()
@CommandHandler(ReserveStock)
export class ReserveStockHandler implements HandlesCommand<typeof ReserveStock> {
  constructor(@inject(Inventory) private readonly inventory: Inventory) {}

  handle(command: PayloadOf<typeof ReserveStock>, ctx: MessageContext): void {
    const reservationId = this.inventory.reserve(command.orderId, command.lines);
    ctx.publish(StockReserved, { orderId: command.orderId, reservationId });
  }
}

/**
 * Charges the customer's card when an order is placed. The gateway may time out: the error is
 * retried with backoff under the example's retry policy (5 attempts). An order paid by bank transfer is
 * not charged: it waits for the customer's transfer (which, in the example, never comes).
 */
@injectable()
@EventHandler(OrderPlaced, { name: 'ChargePayment' })
export class ChargePayment implements HandlesEvent<typeof OrderPlaced> {
  constructor(@inject(OrdersTokens.PaymentGateway) private readonly payments: PaymentGateway) {}

  async handle(event: PayloadOf<typeof OrderPlaced>, ctx: MessageContext): Promise<void> {
    if (event.payment !== 'card') return;
    const paymentId = await this.payments.charge(event.orderId, event.totalCents);
    ctx.publish(PaymentCharged, { orderId: event.orderId, paymentId, amountCents: event.totalCents });
  }
}

/**
 * Tells the legacy CRM about each order. Its own retry policy (3 attempts) overrides the bus's
 * attempts; backoff still comes from the bus. When the CRM stays down, the message is dead-lettered
 * for this subscription only: the other subscriptions of the same event are not affected.
 */
@injectable()
@EventHandler(OrderPlaced, { name: 'NotifyLegacyCrm', retry: { attempts: 3 } })
export class NotifyLegacyCrm implements HandlesEvent<typeof OrderPlaced> {
  constructor(@inject(OrdersTokens.LegacyCrm) private readonly crm: LegacyCrm) {}

  async handle(event: PayloadOf<typeof OrderPlaced>): Promise<void> {
    await this.crm.notifyOrderPlaced(event.orderId, event.customer);
  }
}

/** Ships an order the fulfilment saga found paid and reserved: its stock leaves the warehouse. */
@injectable()
@CommandHandler(ShipOrder)
export class ShipOrderHandler implements HandlesCommand<typeof ShipOrder> {
  constructor(@inject(Inventory) private readonly inventory: Inventory) {}

  handle(command: PayloadOf<typeof ShipOrder>): void {
    this.inventory.release(command.orderId);
  }
}

/** Gives back the stock of an order the fulfilment saga cancelled. */
@injectable()
@CommandHandler(ReleaseStock)
export class ReleaseStockHandler implements HandlesCommand<typeof ReleaseStock> {
  constructor(@inject(Inventory) private readonly inventory: Inventory) {}

  handle(command: PayloadOf<typeof ReleaseStock>): void {
    this.inventory.release(command.orderId);
  }
}
