// The message the benches send: a command with a two-field payload and a handler that does
// nothing but read it, so what is measured is the bus, not the handler.

import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type DedupeMode,
  type HandlesCommand,
  type MessageBroker,
  type MessageBus,
  type PayloadOf,
} from '../src/index.js';

/** The benches' command. */
export const PlaceOrder = defineCommand('bench.PlaceOrder', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
});

/**
 * The same command (same type, schema and handler) with `dedupe: 'while-queued'`: on Redis its jobs
 * carry no deduplication id. A bus knows one of the two, never both.
 */
export const PlaceOrderWhileQueued = defineCommand(PlaceOrder.type, {
  schema: PlaceOrder.schema,
  dedupe: 'while-queued',
});

/** Its handler: reads the payload and returns. */
@CommandHandler(PlaceOrder)
export class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(payload: PayloadOf<typeof PlaceOrder>): void {
    if (payload.amount <= 0) throw new Error('unreachable');
  }
}

/** The same handler, of {@link PlaceOrderWhileQueued}. */
@CommandHandler(PlaceOrderWhileQueued)
export class PlaceOrderWhileQueuedHandler implements HandlesCommand<typeof PlaceOrderWhileQueued> {
  handle(payload: PayloadOf<typeof PlaceOrderWhileQueued>): void {
    if (payload.amount <= 0) throw new Error('unreachable');
  }
}

/** The payload of message `i`. */
export const payloadOf = (i: number): PayloadOf<typeof PlaceOrder> => ({
  orderId: `o-${i}`,
  amount: 1 + (i % 10),
});

/**
 * A bus of endpoint `bench` on `broker` that handles PlaceOrder and calls `onHandled` after each ack;
 * with `dedupe` 'while-queued', the PlaceOrder it knows is {@link PlaceOrderWhileQueued}.
 */
export function placeOrderBus(
  broker: MessageBroker,
  concurrency: number,
  onHandled: () => void,
  dedupe: DedupeMode = 'window',
): MessageBus {
  return createBus({
    endpoint: 'bench',
    broker,
    handlers: [dedupe === 'window' ? PlaceOrderHandler : PlaceOrderWhileQueuedHandler],
    concurrency,
    logger: silentLogger,
    hooks: { onHandled },
  });
}
