import type { DeadLetterRecord, ReplayRecord } from '../../dead-letters/dead-letter-store.js';
import { parseDeadLetterRecord } from '../../dead-letters/parse-dead-letter-record.js';
import { HarrierError } from '../../errors/harrier-error.js';

/**
 * The columns a record is read back from, all as text so a shared pool's type parsers (json, int8,
 * bytea) never change what the store returns.
 */
export const RECORD_COLUMNS = `seq::text AS position, id, version, status, record::text AS record,
  encode(envelope, 'hex') AS envelope, replays::text AS replays, first_failed_at::text AS first_failed_at`;

/** A row as {@link RECORD_COLUMNS} selects it. */
export interface DeadLetterRow {
  readonly position: string;
  readonly id: string;
  readonly version: number;
  readonly status: string;
  readonly record: string;
  readonly envelope: string;
  readonly replays: string;
  readonly first_failed_at: string;
}

/**
 * The `record` column: every field of a record an update replaces, but the envelope (a column of its
 * own, as bytes) and the status, replays and first failure (columns an update keeps or sets).
 */
export function recordJsonOf(record: DeadLetterRecord): string {
  return JSON.stringify({
    messageId: record.messageId,
    kind: record.kind,
    type: record.type,
    endpoint: record.endpoint,
    handler: record.handler,
    reason: record.reason,
    error: record.error,
    attempts: record.attempts,
    attemptCount: record.attemptCount,
    lastFailedAt: record.lastFailedAt,
    fingerprint: record.fingerprint,
    partitionKey: record.partitionKey,
    ordered: record.ordered,
    logPosition: record.logPosition,
  });
}

/** The `replays` column. */
export function replaysJsonOf(replays: readonly ReplayRecord[]): string {
  return JSON.stringify(replays);
}

/** The replays of a row, as JSON values (checked with the rest of the record by {@link recordOf}). */
export function replaysOf(row: Pick<DeadLetterRow, 'id' | 'replays'>): ReplayRecord[] {
  const replays = parseJson(row.id, 'replays', row.replays);
  if (!Array.isArray(replays)) throw corrupt(row.id, ['replays: not an array']);
  return replays as ReplayRecord[];
}

/**
 * The record a row holds, checked field by field.
 * @throws HarrierError `dead-letter-corrupt` naming the row when a column does not hold a record.
 */
export function recordOf(row: DeadLetterRow): DeadLetterRecord {
  const fields = parseJson(row.id, 'record', row.record);
  const parsed = parseDeadLetterRecord({
    ...(typeof fields === 'object' && fields !== null ? fields : {}),
    id: row.id,
    envelope: Buffer.from(row.envelope, 'hex').toString('utf8'),
    firstFailedAt: Number(row.first_failed_at),
    status: row.status,
    replays: parseJson(row.id, 'replays', row.replays),
  });
  if (!parsed.ok) throw corrupt(row.id, parsed.issues);
  return parsed.record;
}

function parseJson(id: string, column: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw corrupt(id, [`${column}: not JSON`]);
  }
}

function corrupt(id: string, issues: readonly string[]): HarrierError {
  return new HarrierError(
    'dead-letter-corrupt',
    `Dead letter "${id}" in PostgreSQL is not a record Harrier wrote (${issues.join('; ')}): remove it (store.remove([id])) or restore the row from a backup`,
  );
}
