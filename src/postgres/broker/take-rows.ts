import type pg from 'pg';
import type { PostgresTables } from '../postgres-schema.js';
import { TAKEN_COLUMNS, type TakenRow } from './queue-row.js';
import type { ReceiverLanes } from './receiver-lanes.js';

/**
 * A receiver's lanes as rows (`$1` lanes, `$2` its ordered-command lane with `$3` its command types):
 * each lane is then read on its own, in index order, so a backlog costs a take only the rows it takes.
 */
const LANES = `lanes AS (
       SELECT unnest($1::text[]) AS lane, NULL::text[] AS types
       UNION ALL SELECT $2::text, $3::text[])`;

/**
 * Takes up to `limit` rows of `lanes` that are due (oldest due first), in one statement: each gets
 * a fresh delivery token and a lease until `leaseUntil`.
 *
 * @remarks
 * `FOR UPDATE SKIP LOCKED`: receivers of every process take side by side, never the same row. Each
 * lane is read in `(lane, run_at, seq)` index order up to `limit` rows (rows locked there beyond the
 * final `limit` are let go when the statement ends). A row
 * still holding a delivery token is one whose lease ran out (its `run_at` is its lease's end): its
 * holder went away without settling it, so the take counts an unsettled end and an attempt. A row
 * with an `order_key` is taken only when no earlier row of its lane and key exists, in whatever
 * state (held, waiting for a retry): one at a time per key, in publish order.
 */
export async function takeRows(
  db: pg.Pool | pg.ClientBase,
  tables: PostgresTables,
  lanes: ReceiverLanes,
  limit: number,
  now: number,
  leaseUntil: number,
): Promise<TakenRow[]> {
  const q = tables.queue;
  const result = await db.query<TakenRow>(
    `WITH ${LANES},
     c AS (
       SELECT x.seq FROM lanes l CROSS JOIN LATERAL (
         SELECT q.seq, q.run_at FROM ${q} q
          WHERE q.lane = l.lane AND q.run_at <= $4 AND (l.types IS NULL OR q.type = ANY(l.types))
            AND (q.order_key IS NULL OR NOT EXISTS (
                  SELECT 1 FROM ${q} e WHERE e.lane = q.lane AND e.order_key = q.order_key AND e.seq < q.seq))
          ORDER BY q.run_at, q.seq
          LIMIT $5
          FOR UPDATE SKIP LOCKED) x
        ORDER BY x.run_at, x.seq
        LIMIT $5)
     UPDATE ${q} q SET
        attempt = q.attempt + CASE WHEN q.delivery IS NULL THEN 0 ELSE 1 END,
        unsettled_ends = q.unsettled_ends + CASE WHEN q.delivery IS NULL THEN 0 ELSE 1 END,
        delivery = gen_random_uuid(), lease_until = $6, run_at = $6
       FROM c WHERE q.seq = c.seq
     RETURNING ${TAKEN_COLUMNS}`,
    [lanes.lanes, lanes.orderedLane, lanes.commandTypes, now, limit, leaseUntil],
  );
  return result.rows.sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1));
}

/** When the next row of `lanes` that is not due yet becomes due (a delay, a retry, a lease's end). */
export async function nextDue(
  db: pg.Pool | pg.ClientBase,
  tables: PostgresTables,
  lanes: ReceiverLanes,
  now: number,
): Promise<number | undefined> {
  const result = await db.query<{ due: string | null }>(
    `WITH ${LANES}
     SELECT min(x.run_at)::text AS due FROM lanes l CROSS JOIN LATERAL (
       SELECT q.run_at FROM ${tables.queue} q
        WHERE q.lane = l.lane AND q.run_at > $4 AND (l.types IS NULL OR q.type = ANY(l.types))
        ORDER BY q.run_at LIMIT 1) x`,
    [lanes.lanes, lanes.orderedLane, lanes.commandTypes, now],
  );
  const due = result.rows[0]?.due;
  return due === null || due === undefined ? undefined : Number(due);
}
