import { MAX_ATTEMPT_HISTORY, type AttemptRecord, type ErrorInfo } from '../../broker/message-broker.js';
import {
  MAX_REPLAY_HISTORY,
  type DeadLetterRecord,
  type DeadLetterStatus,
  type LogPosition,
  type ReplayRecord,
} from '../../dead-letters/dead-letter-store.js';
import { HarrierError } from '../../errors/harrier-error.js';
import type { MessageKind } from '../../messages/definition.js';

/** Stacks are capped at 4 KiB by `toErrorInfo`; enforced again on write. */
const MAX_STACK_CHARS = 4096;

/**
 * A record is a hash: `data` (the JSON of every field an update replaces), `first` (firstFailedAt),
 * `status`, `replays` (newline-separated JSON entries, oldest first: JSON never holds a raw newline,
 * so scripts can append and trim without a JSON library that would round numbers) and `v`, a version
 * bumped by every write so a purge never deletes a record changed after it was read. Scripts also keep
 * `fp` and `last` there for the failure-group aggregates, and the filter fields (see FILTER_FIELDS_LUA);
 * records are read back from these five alone.
 */
export const RECORD_FIELDS = ['data', 'first', 'status', 'replays', 'v'] as const;

/** The JSON kept in a record's `data` field: every field an update replaces. */
interface StoredData {
  readonly id: string;
  readonly messageId?: string;
  readonly kind?: MessageKind;
  readonly type?: string;
  readonly endpoint: string;
  readonly handler?: string;
  readonly reason: string;
  readonly error: ErrorInfo;
  readonly attempts: readonly AttemptRecord[];
  readonly attemptCount: number;
  readonly lastFailedAt: number;
  readonly fingerprint: string;
  readonly envelope: string;
  readonly partitionKey?: string;
  readonly ordered: boolean;
  readonly logPosition?: LogPosition;
}

/** An error with only the fields of {@link ErrorInfo}, its stack capped again. */
function boundedError(error: ErrorInfo): ErrorInfo {
  return {
    name: error.name,
    message: error.message,
    ...(error.code !== undefined ? { code: error.code } : {}),
    ...(error.stack !== undefined ? { stack: error.stack.slice(0, MAX_STACK_CHARS) } : {}),
  };
}

/** The JSON of a record's `data` field. */
export function encodeRecordData(record: DeadLetterRecord): string {
  const data: StoredData = {
    id: record.id,
    ...(record.messageId !== undefined ? { messageId: record.messageId } : {}),
    ...(record.kind !== undefined ? { kind: record.kind } : {}),
    ...(record.type !== undefined ? { type: record.type } : {}),
    endpoint: record.endpoint,
    ...(record.handler !== undefined ? { handler: record.handler } : {}),
    reason: record.reason,
    error: boundedError(record.error),
    // The record type promises these bounds, but a record built by hand or by another version may
    // break them, and a Redis that holds 100000 records must not grow without limit.
    attempts: record.attempts.slice(-MAX_ATTEMPT_HISTORY).map((attempt) => ({
      attempt: attempt.attempt,
      at: attempt.at,
      error: boundedError(attempt.error),
    })),
    attemptCount: record.attemptCount,
    lastFailedAt: record.lastFailedAt,
    fingerprint: record.fingerprint,
    envelope: record.envelope,
    ...(record.partitionKey !== undefined ? { partitionKey: record.partitionKey } : {}),
    ordered: record.ordered,
    ...(record.logPosition !== undefined
      ? {
          logPosition: {
            topic: record.logPosition.topic,
            partition: record.logPosition.partition,
            offset: record.logPosition.offset,
          },
        }
      : {}),
  };
  return JSON.stringify(data);
}

/** One replay entry as its JSON line in the `replays` field. */
export function encodeReplay(replay: ReplayRecord): string {
  return JSON.stringify({
    at: replay.at,
    ...(replay.by !== undefined ? { by: replay.by } : {}),
    ...(replay.handledAt !== undefined ? { handledAt: replay.handledAt } : {}),
  });
}

/** The `replays` field for a replay history: its latest {@link MAX_REPLAY_HISTORY} entries, one JSON line each. */
export function encodeReplays(replays: readonly ReplayRecord[]): string {
  return replays.slice(-MAX_REPLAY_HISTORY).map(encodeReplay).join('\n');
}

function decodeReplays(text: string): ReplayRecord[] {
  if (text === '') return [];
  return text.split('\n').map((line) => {
    const entry = JSON.parse(line) as { at: number; by?: string; handledAt?: number };
    return {
      at: entry.at,
      ...(entry.by !== undefined ? { by: entry.by } : {}),
      ...(entry.handledAt !== undefined ? { handledAt: entry.handledAt } : {}),
    };
  });
}

/**
 * The record stored under `key`, from its fields.
 * @throws HarrierError `dead-letter-corrupt` when `data` or `replays` is not the JSON Harrier writes.
 */
export function decodeRecord(
  key: string,
  data: string,
  first: string,
  status: string,
  replays: string,
): DeadLetterRecord {
  let parsed: StoredData;
  let replayList: ReplayRecord[];
  try {
    parsed = JSON.parse(data) as StoredData;
    replayList = decodeReplays(replays);
  } catch (error) {
    throw new HarrierError(
      'dead-letter-corrupt',
      `Dead letter "${key}" in Redis is not valid JSON: something other than Harrier wrote to this key prefix; remove that record, and give the store a prefix of its own`,
      { cause: error },
    );
  }
  return {
    id: parsed.id,
    messageId: parsed.messageId,
    kind: parsed.kind,
    type: parsed.type,
    endpoint: parsed.endpoint,
    handler: parsed.handler,
    reason: parsed.reason,
    error: parsed.error,
    attempts: parsed.attempts,
    attemptCount: parsed.attemptCount,
    firstFailedAt: Number(first),
    lastFailedAt: parsed.lastFailedAt,
    fingerprint: parsed.fingerprint,
    envelope: parsed.envelope,
    partitionKey: parsed.partitionKey,
    ordered: parsed.ordered,
    ...(parsed.logPosition !== undefined ? { logPosition: parsed.logPosition } : {}),
    status: status as DeadLetterStatus,
    replays: replayList,
  };
}
