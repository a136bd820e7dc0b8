// The fair NestJS side of the `execute` rows, shared by bench/in-memory.ts and bench/execute-cpu.ts so
// both measure the same Nest handler.
import { Command, CommandHandler as NestCommandHandler, type ICommandHandler } from '@nestjs/cqrs';
import { PlaceOrder } from './place-order.js';

/**
 * The fair comparison for `execute`: Harrier validates every payload against its zod schema before the
 * handler runs, so this Nest command's handler runs the same `schema.parse` first.
 */
export class NestValidatedPlaceOrder extends Command<{ accepted: boolean }> {
  constructor(
    readonly orderId: string,
    readonly amount: number,
  ) {
    super();
  }
}

/** The handler of {@link NestValidatedPlaceOrder} (a Nest singleton): parses, then answers. */
@NestCommandHandler(NestValidatedPlaceOrder)
export class NestValidatedPlaceOrderHandler implements ICommandHandler<NestValidatedPlaceOrder> {
  execute(command: NestValidatedPlaceOrder): Promise<{ accepted: boolean }> {
    const payload = PlaceOrder.schema.parse({ orderId: command.orderId, amount: command.amount });
    return Promise.resolve({ accepted: payload.amount > 0 });
  }
}
