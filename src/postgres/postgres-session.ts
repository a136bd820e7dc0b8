import type pg from 'pg';
import { HarrierError } from '../errors/harrier-error.js';
import type { MessageContext } from '../handlers/message-context.js';

/** The transaction of a handler call running in a postgres unit: its client and the unit's token. */
export interface Session {
  readonly client: pg.ClientBase;
  /** Which unit opened it: a saga store uses the session only of a unit it joined. */
  readonly unit: object;
}

/** The transaction of each handler call running in a postgres unit, by its context. */
const sessions = new WeakMap<MessageContext, Session>();

/**
 * Makes `client` the session of the handler call whose context is `context` (until
 * {@link endSession}), opened by `unit`.
 */
export function beginSession(context: MessageContext, client: pg.ClientBase, unit: object): void {
  sessions.set(context, { client, unit });
}

/** The session of the handler call whose context is `context`, if it runs in a postgres unit now. */
export function sessionOf(context: MessageContext): Session | undefined {
  return sessions.get(context);
}

/** Ends the session of a handler call: {@link postgresSession} throws for its context from now on. */
export function endSession(context: MessageContext): void {
  sessions.delete(context);
}

/**
 * The PostgreSQL client of the transaction a handler call runs in, under `postgresUnitOfWork`: the
 * handler's own writes through it commit together with the inbox row, the outbox rows, the
 * projection checkpoint and the saga instance of the call, or not at all.
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
 * `unitOfWork: postgresUnitOfWork(...)` on the bus, a handler kind the unit leaves out, a saga step
 * whose saga store is not a `PostgresSagaStore` joined to the unit, a query, or the client asked for
 * after the handler returned).
 */
export function postgresSession(ctx: MessageContext): pg.ClientBase {
  const client = sessions.get(ctx)?.client;
  if (client === undefined) {
    throw new HarrierError(
      'no-transaction',
      `Handler "${ctx.handler}" asked for its PostgreSQL transaction (postgresSession) while handling "${ctx.envelope.type}", but it runs in no postgres unit of work: give the bus unitOfWork: postgresUnitOfWork({ connection }) from harrier/postgres, and make sure its kinds option includes this handler's kind (queries run in one only when kinds lists 'query'; saga steps only with a PostgresSagaStore on the unit's database and schema)`,
    );
  }
  return client;
}
