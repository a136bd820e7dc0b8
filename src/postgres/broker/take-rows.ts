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
 * state (held, waiting for a retry): one at a time per key, in publish order. The statement is the
 * schema's `queue_take` function, which turns bitmap scans off: on a table without statistics (a
 * fresh install) the planner would otherwise sort every waiting row of a lane on each take.
 */
export async function takeRows(
  db: pg.Pool | pg.ClientBase,
  tables: PostgresTables,
  lanes: ReceiverLanes,
  limit: number,
  now: number,
  leaseUntil: number,
): Promise<TakenRow[]> {
  // The statement is the schema's queue_take function (migration 2), for its planner setting.
  const result = await db.query<TakenRow>(
    `SELECT ${TAKEN_COLUMNS} FROM ${tables.queueTake}($1::text[], $2::text, $3::text[], $4::bigint, $5::integer, $6::bigint) q`,
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
