/**
 * The order-summary read model in PostgreSQL: the table, the projection that writes it in the
 * transaction of `postgresUnitOfWork` (so each event's rows and the projection's checkpoint commit
 * together), and the query handler that reads it.
 */
import type pg from 'pg';
import {
  On,
  Projection,
  QueryHandler,
  type HandlerClass,
  type HandlesQuery,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { postgresSession } from '../../src/postgres/index.js';
import {
  ListOrderSummaries,
  OrderPlaced,
  PaymentCharged,
  StockReserved,
  type OrderSummary,
} from './messages.js';

/** The application's own tables of the example: the orders it took, and the read model. */
export function ordersTablesSql(schema: string): string {
  return `
    CREATE TABLE IF NOT EXISTS "${schema}".orders (
      order_id text PRIMARY KEY,
      customer text NOT NULL,
      placed_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE IF NOT EXISTS "${schema}".order_summaries (
      order_id text PRIMARY KEY,
      customer text NOT NULL DEFAULT '',
      items integer NOT NULL DEFAULT 0,
      total_cents integer NOT NULL DEFAULT 0,
      reservation_id text,
      payment_id text
    );`;
}

/** Reads the read model, ordered by order id (the query handler's answer, and the test's). */
export async function readOrderSummaries(
  db: pg.Pool | pg.PoolClient,
  schema: string,
): Promise<OrderSummary[]> {
  const { rows } = await db.query<{
    order_id: string;
    customer: string;
    items: number;
    total_cents: number;
    reservation_id: string | null;
    payment_id: string | null;
  }>(`SELECT * FROM "${schema}".order_summaries ORDER BY order_id COLLATE "C"`);
  return rows.map((row) => ({
    orderId: row.order_id,
    customer: row.customer,
    items: row.items,
    totalCents: row.total_cents,
    ...(row.reservation_id !== null ? { reservationId: row.reservation_id } : {}),
    ...(row.payment_id !== null ? { paymentId: row.payment_id } : {}),
  }));
}

/**
 * The projection and query handler of the read model in `schema`, reading with `pool`. They replace
 * OrderSummaryProjection and ListOrderSummariesHandler (projection.ts) under the same names.
 */
export function postgresReadModel(pool: pg.Pool, schema: string): HandlerClass[] {
  const table = `"${schema}".order_summaries`;

  /** Sets one column of the order's row, in the unit's transaction. */
  const setColumn = async (
    ctx: MessageContext,
    orderId: string,
    column: 'reservation_id' | 'payment_id',
    value: string,
  ): Promise<void> => {
    await postgresSession(ctx).query(
      `INSERT INTO ${table} (order_id, ${column}) VALUES ($1, $2)
       ON CONFLICT (order_id) DO UPDATE SET ${column} = EXCLUDED.${column}`,
      [orderId, value],
    );
  };

  /** Writes through the unit's transaction: setting columns (never adding) keeps it simple to check. */
  @Projection('OrderSummary')
  class OrderSummaryProjection {
    @On(OrderPlaced)
    async placed(event: PayloadOf<typeof OrderPlaced>, ctx: MessageContext): Promise<void> {
      const items = event.lines.reduce((sum, line) => sum + line.quantity, 0);
      await postgresSession(ctx).query(
        `INSERT INTO ${table} (order_id, customer, items, total_cents) VALUES ($1, $2, $3, $4)
         ON CONFLICT (order_id) DO UPDATE
           SET customer = EXCLUDED.customer, items = EXCLUDED.items, total_cents = EXCLUDED.total_cents`,
        [event.orderId, event.customer, items, event.totalCents],
      );
    }

    @On(StockReserved)
    async stockReserved(event: PayloadOf<typeof StockReserved>, ctx: MessageContext): Promise<void> {
      await setColumn(ctx, event.orderId, 'reservation_id', event.reservationId);
    }

    @On(PaymentCharged)
    async paymentCharged(event: PayloadOf<typeof PaymentCharged>, ctx: MessageContext): Promise<void> {
      await setColumn(ctx, event.orderId, 'payment_id', event.paymentId);
    }
  }

  /** Queries are outside the unit (its default kinds), so this reads with the pool. */
  @QueryHandler(ListOrderSummaries)
  class ListOrderSummariesHandler implements HandlesQuery<typeof ListOrderSummaries> {
    handle(): Promise<OrderSummary[]> {
      return readOrderSummaries(pool, schema);
    }
  }

  return [OrderSummaryProjection, ListOrderSummariesHandler];
}
