import type pg from 'pg';
import type { PostgresTables } from '../postgres-schema.js';

/**
 * Deletes every copy of message `messageId` that waits for its due time and was never delivered, and
 * its dedupe rows, in one statement; returns the lanes of the copies deleted (one per copy).
 *
 * @remarks
 * The message's queues are not known from its id alone: they are found by a loose scan of the
 * `(queue, message_id)` index (one index probe per distinct queue), so a cancel reads no queue's rows
 * beyond that message's. A copy held by a receiver (`delivery` set), one that failed or ended
 * unsettled before (`attempt` above 1), a replay, or one due already (`run_at` not after `now`) is
 * left as it is. A take that locked a copy first wins: the delete finds it held and skips it.
 */
export async function cancelRows(
  db: pg.Pool | pg.ClientBase,
  tables: PostgresTables,
  messageId: string,
  now: number,
): Promise<string[]> {
  const result = await db.query<{ lane: string }>(
    `WITH RECURSIVE queues AS (
       (SELECT queue FROM ${tables.queue} ORDER BY queue LIMIT 1)
       UNION ALL
       SELECT (SELECT q.queue FROM ${tables.queue} q WHERE q.queue > queues.queue ORDER BY q.queue LIMIT 1)
         FROM queues WHERE queues.queue IS NOT NULL),
     gone AS (
       DELETE FROM ${tables.queue}
        WHERE queue IN (SELECT queue FROM queues WHERE queue IS NOT NULL) AND message_id = $1
          AND delivery IS NULL AND attempt = 1 AND unsettled_ends = 0 AND replay_of IS NULL
          AND run_at > $2::bigint
       RETURNING queue, lane),
     forgotten AS (
       DELETE FROM ${tables.dedupe} d USING gone WHERE d.queue = gone.queue AND d.message_id = $1)
     SELECT lane FROM gone`,
    [messageId, now],
  );
  return result.rows.map((row) => row.lane);
}
