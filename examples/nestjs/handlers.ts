import { Inject, Injectable, Scope } from '@nestjs/common';
import {
  CommandHandler,
  EventHandler,
  QueryHandler,
  type HandlesCommand,
  type HandlesEvent,
  type HandlesQuery,
  type MessageContext,
  type PayloadOf,
  type ResultOf,
} from '../../src/index.js';
import { InjectMessageContext } from '../../src/nestjs/index.js';
import { GetOrder, OrderPlaced, PlaceOrder } from './messages.js';

/** A plain Nest service (a singleton): what the command handler needs. */
@Injectable()
export class PriceList {
  totalOf(items: readonly string[]): number {
    return items.length * 12.5;
  }
}

/** The read model (a singleton): what the event handler writes and the query reads. */
@Injectable()
export class OrderBook {
  readonly #orders = new Map<string, NonNullable<ResultOf<typeof GetOrder>>>();

  record(orderId: string, total: number, confirmedBy: string): void {
    this.#orders.set(orderId, { orderId, total, confirmedBy });
  }

  get(orderId: string): ResultOf<typeof GetOrder> {
    return this.#orders.get(orderId) ?? null;
  }
}

// tsx (esbuild) does not emit decorator metadata, so every dependency is named with @Inject; an app
// built with tsc and emitDecoratorMetadata (nest build) can inject by type instead.

@Injectable()
@CommandHandler(PlaceOrder)
export class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  constructor(@Inject(PriceList) private readonly prices: PriceList) {}

  handle(order: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    // Recorded now, published only once this handler has returned without throwing.
    ctx.publish(OrderPlaced, { orderId: order.orderId, total: this.prices.totalOf(order.items) });
  }
}

/** Made once per message (Scope.REQUEST): it is given the context of the message being handled. */
@Injectable({ scope: Scope.REQUEST })
export class Confirmation {
  constructor(@InjectMessageContext() private readonly ctx: MessageContext) {}

  reference(): string {
    return `${this.ctx.handler}/${this.ctx.messageId.slice(-8)} (attempt ${this.ctx.attempt})`;
  }
}

/** Request-scoped through its dependency: Nest makes it, and a Confirmation, for every message. */
@Injectable()
@EventHandler(OrderPlaced)
export class ConfirmOrder implements HandlesEvent<typeof OrderPlaced> {
  constructor(
    @Inject(Confirmation) private readonly confirmation: Confirmation,
    @Inject(OrderBook) private readonly book: OrderBook,
  ) {}

  handle(event: PayloadOf<typeof OrderPlaced>): void {
    this.book.record(event.orderId, event.total, this.confirmation.reference());
  }
}

@Injectable()
@QueryHandler(GetOrder)
export class GetOrderHandler implements HandlesQuery<typeof GetOrder> {
  constructor(@Inject(OrderBook) private readonly book: OrderBook) {}

  handle(query: PayloadOf<typeof GetOrder>): ResultOf<typeof GetOrder> {
    return this.book.get(query.orderId);
  }
}
