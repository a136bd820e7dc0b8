// The Harrier command the in-process benches execute: one zod-validated payload, a handler that
// answers at once, so what is measured is Harrier's own cost per call.
import 'reflect-metadata';
import { z } from 'zod';
import { CommandHandler, defineCommand, type HandlesCommand, type PayloadOf } from '../src/index.js';

/** A command with a two-field schema and a typed result. */
export const PlaceOrder = defineCommand('bench.PlaceOrder', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
  result: z.object({ accepted: z.boolean() }),
});

/** Answers {@link PlaceOrder} without any work of its own. */
@CommandHandler(PlaceOrder)
export class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(payload: PayloadOf<typeof PlaceOrder>): { accepted: boolean } {
    return { accepted: payload.amount > 0 };
  }
}

/** The i-th payload of a run. */
export const payloadOf = (i: number): PayloadOf<typeof PlaceOrder> => ({
  orderId: `o-${i}`,
  amount: 1 + (i % 10),
});
