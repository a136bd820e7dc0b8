import type pg from 'pg';
import { HarrierError } from '../errors/harrier-error.js';
import type { MessageContext } from '../handlers/message-context.js';

/** The transaction client of each handler call running in a postgres unit, by its context. */
const sessions = new WeakMap<MessageContext, pg.ClientBase>();

/** Makes `client` the session of the handler call whose context is `context` (until {@link endSession}). */
export function beginSession(context: MessageContext, client: pg.ClientBase): void {
  sessions.set(context, client);
}

/** Ends the session of a handler call: {@link postgresSession} throws for its context from now on. */
export function endSession(context: MessageContext): void {
  sessions.delete(context);
}

/**
 * The PostgreSQL client of the transaction a handler call runs in, under `postgresUnitOfWork`: the
 * handler's own writes through it commit together with the inbox row, the outbox rows and the
 * projection checkpoint of the call, or not at all.
 *
 * @remarks
 * Do not `BEGIN`, `COMMIT` or `ROLLBACK` on it, nor release it: the unit does. A statement that
 * fails aborts the whole transaction, so let the error propagate (the call is retried) rather than
 * catching it and going on; use a `SAVEPOINT` for a statement that may fail on purpose. The client is
 * only valid while the handler runs: do not keep it.
 *
 * @example
 * ```ts
 * @CommandHandler(PlaceOrder)
 * class PlaceOrderHandler {
 *   async handle(order: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): Promise<void> {
 *     const db = postgresSession(ctx);
 *     await db.query('INSERT INTO orders (id, total) VALUES ($1, $2)', [order.id, order.total]);
 *     ctx.publish(OrderPlaced, { orderId: order.id }); // lands in the outbox in the same transaction
 *   }
 * }
 * ```
 * @throws HarrierError `no-transaction` when the call does not run in a postgres unit of work (no
 * `unitOfWork: postgresUnitOfWork(...)` on the bus, a handler kind the unit leaves out, a saga step,
 * a query, or the client asked for after the handler returned).
 */
export function postgresSession(ctx: MessageContext): pg.ClientBase {
  const client = sessions.get(ctx);
  if (client === undefined) {
    throw new HarrierError(
      'no-transaction',
      `Handler "${ctx.handler}" asked for its PostgreSQL transaction (postgresSession) while handling "${ctx.envelope.type}", but it runs in no postgres unit of work: give the bus unitOfWork: postgresUnitOfWork({ connection }) from harrier/postgres, and make sure its kinds option includes this handler's kind (saga steps and queries never run in one)`,
    );
  }
  return client;
}
