/**
 * A small shop whose read model is right only if the messages of one order are handled in the order
 * they were sent: the last address change wins, and a cancellation follows the placement. Every
 * message carries the order id as its partition key; `ordered` says whether the definitions ask for
 * per-key order. Used by the createTestBus tests and by the e2e test that runs it on both brokers.
 */
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  On,
  Projection,
  defineCommand,
  defineEvent,
  type HandlerClass,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';

/** The shop's read model. */
export interface ShopModel {
  readonly addresses: Record<string, string>;
  readonly statuses: Record<string, string>;
}

/** What the shop's read model must be once {@link ShopApp.play} has been handled. */
export const RIGHT_SHOP_MODEL: ShopModel = {
  addresses: { 'o-1': '3 Final Avenue', 'o-2': '3 Final Avenue', 'o-3': '3 Final Avenue' },
  statuses: { 'o-1': 'cancelled', 'o-2': 'cancelled', 'o-3': 'cancelled' },
};

/** How many deliveries {@link ShopApp.play} causes: per order, three commands and two events. */
export const SHOP_DELIVERIES = 3 * (3 + 2);

export interface ShopApp {
  readonly handlers: HandlerClass[];
  /** Sends and publishes the story of three orders, one call after another. */
  play(bus: MessageBus): Promise<void>;
  /** The read model as it is now. */
  model(): ShopModel;
}

/** A fresh shop: its own definitions, handlers and read model. */
export function shopApp(ordered: boolean): ShopApp {
  const ChangeAddress = defineCommand('shop.ChangeAddress', {
    schema: z.object({ orderId: z.string(), address: z.string() }),
    partitionKey: 'orderId',
    ordered,
  });
  const OrderPlaced = defineEvent('shop.OrderPlaced', {
    schema: z.object({ orderId: z.string() }),
    partitionKey: 'orderId',
    ordered,
  });
  const OrderCancelled = defineEvent('shop.OrderCancelled', {
    schema: z.object({ orderId: z.string() }),
    partitionKey: 'orderId',
    ordered,
  });
  const addresses = new Map<string, string>();
  const statuses = new Map<string, string>();

  @CommandHandler(ChangeAddress)
  class ChangeAddressHandler {
    handle(command: PayloadOf<typeof ChangeAddress>): void {
      addresses.set(command.orderId, command.address);
    }
  }

  @Projection('OrderStatus')
  class OrderStatusProjection {
    @On(OrderPlaced)
    placed(event: PayloadOf<typeof OrderPlaced>): void {
      statuses.set(event.orderId, 'placed');
    }

    @On(OrderCancelled)
    cancelled(event: PayloadOf<typeof OrderCancelled>): void {
      statuses.set(event.orderId, 'cancelled');
    }
  }

  return {
    handlers: [ChangeAddressHandler, OrderStatusProjection],
    async play(bus) {
      for (const orderId of ['o-1', 'o-2', 'o-3']) {
        for (const street of ['1 Old Road', '2 New Street', '3 Final Avenue'])
          await bus.send(ChangeAddress, { orderId, address: street });
        await bus.publish(OrderPlaced, { orderId });
        await bus.publish(OrderCancelled, { orderId });
      }
    },
    model: () => ({ addresses: Object.fromEntries(addresses), statuses: Object.fromEntries(statuses) }),
  };
}

/** The shop's order lifecycle: {@link orderLifecycleApp}. */
export interface OrderLifecycleApp {
  readonly handlers: HandlerClass[];
  /** Sends `PlaceOrder` then at once `CancelOrder` for each order, one `send` after another. */
  play(bus: MessageBus, orders: readonly string[]): Promise<void>;
  /** Each order's status in the read model: `placed` or `cancelled`. */
  statuses(): Record<string, string>;
  /** Deliveries {@link OrderLifecycleApp.play} causes per order: two commands and two events. */
  readonly deliveriesPerOrder: number;
}

/**
 * PlaceOrder then CancelOrder for an order, as the shop sends them: each command's handler publishes
 * its event (`OrderPlaced`, `OrderCancelled`), and one event handler keeps each order's status from
 * both. Every message is keyed by order id and `ordered` as asked; PlaceOrder's handler takes
 * `placeMs`. Right only if an order's CancelOrder is handled after its PlaceOrder.
 */
export function orderLifecycleApp(options: { ordered: boolean; placeMs: number }): OrderLifecycleApp {
  const schema = z.object({ orderId: z.string() });
  const keyed = { schema, partitionKey: 'orderId', ordered: options.ordered } as const;
  const PlaceOrder = defineCommand('shop.PlaceOrder', keyed);
  const CancelOrder = defineCommand('shop.CancelOrder', keyed);
  const OrderPlaced = defineEvent('shop.OrderPlaced', keyed);
  const OrderCancelled = defineEvent('shop.OrderCancelled', keyed);
  const statuses = new Map<string, string>();

  @CommandHandler(PlaceOrder)
  class PlaceOrderHandler {
    async handle(command: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): Promise<void> {
      await new Promise((resolve) => setTimeout(resolve, options.placeMs));
      ctx.publish(OrderPlaced, command);
    }
  }

  @CommandHandler(CancelOrder)
  class CancelOrderHandler {
    handle(command: PayloadOf<typeof CancelOrder>, ctx: MessageContext): void {
      ctx.publish(OrderCancelled, command);
    }
  }

  @EventHandler([OrderPlaced, OrderCancelled])
  class OrderStatusHandler {
    handle(event: PayloadOf<typeof OrderPlaced>, ctx: MessageContext): void {
      statuses.set(event.orderId, ctx.envelope.type === OrderPlaced.type ? 'placed' : 'cancelled');
    }
  }

  return {
    handlers: [PlaceOrderHandler, CancelOrderHandler, OrderStatusHandler],
    async play(bus, orders) {
      for (const orderId of orders) {
        await bus.send(PlaceOrder, { orderId });
        await bus.send(CancelOrder, { orderId });
      }
    },
    statuses: () => Object.fromEntries(statuses),
    deliveriesPerOrder: 4,
  };
}
