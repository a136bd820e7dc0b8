import { randomUUID } from 'node:crypto';
import {
  CommandHandler,
  EventHandler,
  type MessageContext,
  type PayloadOf,
  type ProcessInfo,
} from '../../../src/index.js';
import { OrderPlaced, PlaceOrder } from '../bus/fixtures.js';

// The handlers of the telemetry tests: a command handler that publishes an event, and two event
// handlers, one that fails its first attempt and one that always fails (2 attempts).

export class FlakyError extends Error {
  override name = 'FlakyError';
}
export class BrokenError extends Error {
  override name = 'BrokenError';
}

@CommandHandler(PlaceOrder)
export class PlaceOrderHandler {
  handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
    ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
    return { accepted: true };
  }
}

@EventHandler(OrderPlaced, { retry: { attempts: 3 } })
export class Flaky {
  handle(_payload: unknown, ctx: MessageContext): void {
    if (ctx.attempt === 1) throw new FlakyError('first attempt fails');
  }
}

@EventHandler(OrderPlaced, { retry: { attempts: 2 } })
export class Broken {
  handle(): void {
    throw new BrokenError('always fails');
  }
}

/** What the pipeline tells telemetry of one delivery of a PlaceOrder, for tests that call hooks directly. */
export function processInfo(): ProcessInfo {
  const id = randomUUID();
  return {
    envelope: {
      v: 1,
      id,
      kind: 'command',
      type: PlaceOrder.type,
      payload: { orderId: 'o-1', amount: 1 },
      meta: { correlationId: id, occurredAt: new Date().toISOString(), headers: {} },
    },
    handler: 'PlaceOrderHandler',
    handlerKind: 'command',
    endpoint: 'shop',
    attempt: 1,
    inProcess: false,
  };
}
