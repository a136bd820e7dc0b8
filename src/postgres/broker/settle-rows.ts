import type pg from 'pg';
import type { AttemptRecord, PendingDeadLetter } from '../../broker/message-broker.js';
import type { PostgresTables } from '../postgres-schema.js';
import { brokerChannel } from './broker-channel.js';

type Db = pg.Pool | pg.ClientBase;

/**
 * Deletes a delivered row (acked, or dead-lettered by the dispatcher) if `token` still holds it;
 * false when it does not (settled already, or its lease ran out and another delivery took it). An
 * ordered row notifies its lane: the next row of its key is due now.
 */
export async function deleteDelivered(
  db: Db,
  tables: PostgresTables,
  seq: string,
  token: string,
): Promise<boolean> {
  const result = await db.query(
    `WITH del AS (DELETE FROM ${tables.queue} WHERE seq = $1 AND delivery = $2 RETURNING lane, order_key)
     SELECT (SELECT count(*) FROM (SELECT pg_notify($3, del.lane) WHERE del.order_key IS NOT NULL) n) AS notified
       FROM del`,
    [seq, token, brokerChannel(tables)],
  );
  return result.rows.length > 0;
}

/**
 * Deletes the delivered rows `seqs[i]` still held by `tokens[i]` (acked), in one statement; returns
 * the seq and ordered lane of each row deleted. A row not returned is no longer held by its token
 * (settled already, or its lease ran out and another delivery took it). Sends no NOTIFY: the caller
 * wakes the lanes of ordered rows (the next row of a key is due now) once the delete committed.
 */
export async function deleteDeliveredMany(
  db: Db,
  tables: PostgresTables,
  seqs: readonly string[],
  tokens: readonly string[],
): Promise<{ readonly seq: string; readonly orderedLane: string | null }[]> {
  const result = await db.query<{ seq: string; ordered_lane: string | null }>(
    `DELETE FROM ${tables.queue} q USING unnest($1::bigint[], $2::uuid[]) AS h(seq, delivery)
      WHERE q.seq = h.seq AND q.delivery = h.delivery
     RETURNING q.seq::text AS seq, CASE WHEN q.order_key IS NOT NULL THEN q.lane END AS ordered_lane`,
    [seqs, tokens],
  );
  return result.rows.map((row) => ({ seq: row.seq, orderedLane: row.ordered_lane }));
}

/**
 * Gives a delivered row back: due at `runAt`, no delivery token, `attempt` and history as given
 * (unchanged for a release). False when `token` no longer holds the row. A row due now notifies
 * its lane.
 */
export async function returnDelivered(
  db: Db,
  tables: PostgresTables,
  seq: string,
  token: string,
  change: {
    readonly runAt: number;
    readonly now: number;
    /** For a retry: the attempt count goes up, and these become the row's history and pending dead letter. */
    readonly retry?: {
      readonly history: readonly AttemptRecord[];
      readonly pendingDeadLetter: PendingDeadLetter | undefined;
    };
  },
): Promise<boolean> {
  const { retry } = change;
  const result = await db.query(
    `WITH upd AS (
       UPDATE ${tables.queue} SET delivery = NULL, lease_until = NULL, run_at = $3
         ${retry === undefined ? '' : ', attempt = attempt + 1, history = $6::json, pending_dead_letter = $7::json'}
        WHERE seq = $1 AND delivery = $2 RETURNING lane)
     SELECT (SELECT count(*) FROM (SELECT pg_notify($4, upd.lane) WHERE $3 <= $5::bigint) n) AS notified FROM upd`,
    [
      seq,
      token,
      change.runAt,
      brokerChannel(tables),
      change.now,
      ...(retry === undefined
        ? []
        : [
            JSON.stringify(retry.history),
            retry.pendingDeadLetter === undefined ? null : JSON.stringify(retry.pendingDeadLetter),
          ]),
    ],
  );
  return result.rows.length > 0;
}

/** The history and attempt of a delivered row, if `token` still holds it (a retry through another broker). */
export async function readDelivered(
  db: Db,
  tables: PostgresTables,
  seq: string,
  token: string,
): Promise<{ readonly history: unknown; readonly attempt: number } | undefined> {
  const result = await db.query<{ history: unknown; attempt: number }>(
    `SELECT history, attempt FROM ${tables.queue} WHERE seq = $1 AND delivery = $2`,
    [seq, token],
  );
  return result.rows[0];
}

/**
 * Moves the leases of held rows to `leaseUntil` in one statement; returns the `<seq>:<token>` of
 * those still held (the others were settled meanwhile, or taken by another receiver after their
 * lease ran out).
 */
export async function renewLeases(
  db: Db,
  tables: PostgresTables,
  held: readonly { readonly seq: string; readonly token: string }[],
  leaseUntil: number,
): Promise<Set<string>> {
  if (held.length === 0) return new Set();
  const result = await db.query<{ seq: string; delivery: string }>(
    `UPDATE ${tables.queue} q SET lease_until = $3, run_at = $3
       FROM unnest($1::bigint[], $2::uuid[]) AS h(seq, delivery)
      WHERE q.seq = h.seq AND q.delivery = h.delivery
     RETURNING q.seq, q.delivery`,
    [held.map((h) => h.seq), held.map((h) => h.token), leaseUntil],
  );
  return new Set(result.rows.map((row) => `${row.seq}:${row.delivery}`));
}

/** Gives many held rows back at once, unhandled (a closing broker's), and notifies their lanes. */
export async function releaseMany(
  db: Db,
  tables: PostgresTables,
  held: readonly { readonly seq: string; readonly token: string }[],
  now: number,
): Promise<void> {
  if (held.length === 0) return;
  await db.query(
    `WITH upd AS (
       UPDATE ${tables.queue} q SET delivery = NULL, lease_until = NULL, run_at = $3
         FROM unnest($1::bigint[], $2::uuid[]) AS h(seq, delivery)
        WHERE q.seq = h.seq AND q.delivery = h.delivery
       RETURNING q.lane)
     SELECT count(pg_notify($4, lane)::text) FROM (SELECT DISTINCT lane FROM upd) l`,
    [held.map((h) => h.seq), held.map((h) => h.token), now, brokerChannel(tables)],
  );
}
