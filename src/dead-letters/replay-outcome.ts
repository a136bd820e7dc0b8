import type { DeadLetterRecord } from './dead-letter-store.js';

/**
 * What became of a replayed dead letter's message:
 * - `pending`: sent back and not settled yet (queued, running, or retrying after a failure), or its
 *   store cannot say (no `markReplayHandled`);
 * - `handled`: a handler ran it to success after the replay;
 * - `failed-again`: it died again after the replay (the record is `dead`, failed after `replayAt`).
 */
export type ReplayOutcome = 'pending' | 'handled' | 'failed-again';

/**
 * The outcome of the replay made at `replayAt` (ms since the epoch), read from the record as it is
 * now; `undefined` when the record has no replay at or after `replayAt` and is not dead again (a
 * replay that was refused, or a record removed and re-added).
 */
export function replayOutcome(record: DeadLetterRecord, replayAt: number): ReplayOutcome | undefined {
  if (record.status === 'dead') return record.lastFailedAt >= replayAt ? 'failed-again' : undefined;
  const replay = [...record.replays].reverse().find((r) => r.at >= replayAt);
  if (replay === undefined) return undefined;
  return replay.handledAt === undefined ? 'pending' : 'handled';
}
