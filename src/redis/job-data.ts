import type { AttemptRecord, OutgoingMessage, PendingDeadLetter } from '../broker/message-broker.js';
import { parseAttemptHistory, parsePendingDeadLetter } from '../broker/delivery-facts.js';
import type { MessageKind } from '../messages/definition.js';

/**
 * What a job carries: the envelope untouched, plus delivery facts kept beside it. The message id is
 * the job id and the kind follows from the queue (`cmd~` or `evt~`), so neither is repeated here;
 * `i` and `k` are still read when present (jobs queued by earlier builds).
 */
export interface JobData {
  /** Encoded envelope. */
  readonly b: string;
  /** Message id (earlier builds only: now the job id). */
  readonly i?: string;
  /** Kind (earlier builds only: now from the queue name). */
  readonly k?: MessageKind;
  /** Partition key. */
  readonly p?: string | undefined;
  /** Ordered. */
  readonly o?: boolean | undefined;
  /** Failed attempts so far. */
  readonly a?: number;
  /** Attempt history, newest last. */
  readonly h?: readonly AttemptRecord[];
  /** A dead-lettering decided by an earlier delivery that could not be recorded. */
  readonly d?: PendingDeadLetter;
  /** The dead letter this job replays (`redeliver` with a `deadLetterId`); absent otherwise. */
  readonly r?: string;
}

/** BullMQ's attempts and stalled counts for a job: never reached, our dispatcher decides retries. */
export const KEEP_ATTEMPTS = 1_000_000;

/** The broker options that end up in every job's BullMQ options. */
export interface JobSettings {
  readonly dedupeWindowMs: number;
  readonly failedRetentionMs: number;
  readonly failedRetentionCount: number;
}

/**
 * The data of a new job for `message`: no attempts yet; `replayOf` is the dead letter it replays,
 * if it does.
 */
export function toJobData(message: OutgoingMessage, replayOf?: string): JobData {
  // Filled in place rather than with conditional spreads: a publish builds one per message and job.
  const data: { -readonly [K in keyof JobData]: JobData[K] } = { b: message.body };
  if (message.partitionKey !== undefined) data.p = message.partitionKey;
  if (message.ordered === true) data.o = true;
  if (replayOf !== undefined) data.r = replayOf;
  return data;
}

/**
 * The part of every job's BullMQ options that only depends on the broker's settings, built once per
 * broker by {@link jobOptionDefaults} and shared (frozen) by all the jobs it publishes.
 */
export interface JobOptionDefaults {
  readonly dedupeWindowMs: number;
  readonly backoff: Readonly<{ type: string }>;
  readonly removeOnFail: Readonly<{ age: number; count: number }>;
}

/** The shared, constant part of the BullMQ options of the jobs a broker with `settings` publishes. */
export function jobOptionDefaults(settings: JobSettings): JobOptionDefaults {
  return Object.freeze({
    dedupeWindowMs: settings.dedupeWindowMs,
    backoff: Object.freeze({ type: 'harrier' }),
    // BullMQ keeps a failed job while both hold: younger than `age` seconds and among the newest `count`.
    removeOnFail: Object.freeze({
      age: Math.ceil(settings.failedRetentionMs / 1000),
      count: settings.failedRetentionCount,
    }),
  });
}

/**
 * BullMQ job options for `message`: its id as job id and, unless its `dedupe` is `'while-queued'`,
 * as deduplication id for the dedupe window; its delay, retention.
 *
 * @remarks
 * The job id alone drops a second add of the id while the job exists. The deduplication id adds a
 * key with a time-to-live that drops it for the window after the job was removed, at a price on
 * every job: BullMQ writes the key on add and reads it again (`PTTL`, and `EXISTS` on its
 * "dedup-next" key) when the job finishes.
 */
export function jobOptions(
  message: OutgoingMessage,
  now: number,
  defaults: JobOptionDefaults,
): Record<string, unknown> {
  const opts: Record<string, unknown> = {
    jobId: message.id,
    // Our dispatcher decides retries; BullMQ's own retry only catches a processor that crashed mid-settle.
    attempts: KEEP_ATTEMPTS,
    backoff: defaults.backoff,
    removeOnComplete: true,
    removeOnFail: defaults.removeOnFail,
  };
  if (message.dedupe !== 'while-queued') {
    opts.deduplication = { id: message.id, ttl: defaults.dedupeWindowMs };
  }
  if (message.deliverAt !== undefined && message.deliverAt > now) opts.delay = message.deliverAt - now;
  return opts;
}

/** Job data as the broker reads it: every field checked, since anything could have written it. */
export interface ParsedJobData {
  body: string;
  messageId: string | undefined;
  kind: MessageKind | undefined;
  partitionKey: string | undefined;
  ordered: boolean;
  attemptsMade: number | undefined;
  history: readonly AttemptRecord[];
  pendingDeadLetter: PendingDeadLetter | undefined;
  /** The dead letter this job replays. */
  replayOf: string | undefined;
  /** Fields that were present but unusable and were dropped, for a log line. */
  dropped: readonly string[];
}

/** Shared by every parsed job without history or dropped fields: nothing writes into them. */
const NO_HISTORY: readonly AttemptRecord[] = Object.freeze([]);
const NONE_DROPPED: readonly string[] = Object.freeze([]);

/**
 * Reads job data leniently and never throws: anything pushed into a queue by something else still
 * becomes a delivery, and a malformed fact beside the envelope is dropped (and named in `dropped`).
 * `queueKind` is the kind of message its queue carries (`QueueSpec.kind`), for jobs that carry none.
 *
 * @remarks
 * Runs once per delivery: a job of today's shape (`b`, perhaps `p`, `o`, `r`) is read field by field
 * without closures or arrays of its own; the facts of a retried job (`a`, `h`, `d`) take the same path.
 */
export function readJobData(data: unknown, jobId: string, queueKind: MessageKind): ParsedJobData {
  if (typeof data === 'object' && data !== null && typeof (data as JobData).b === 'string') {
    const d = data as Partial<Record<keyof JobData, unknown>> & { b: string };
    const { i, k, p, o, a, h, r } = d;
    const messageId = i === undefined || isString(i) ? i : undefined;
    const kind = k === undefined || isKind(k) ? k : undefined;
    const partitionKey = p === undefined || isString(p) ? p : undefined;
    const ordered = o === undefined || isBoolean(o) ? o : undefined;
    const attemptsMade = a === undefined || isAttemptCount(a) ? a : undefined;
    const replayOf = r === undefined || isString(r) ? r : undefined;
    const history = h === undefined ? undefined : parseAttemptHistory(h);
    const pendingDeadLetter = d.d === undefined ? undefined : parsePendingDeadLetter(d.d);
    // A field present and read as undefined was unusable: listed only then, so a sound job allocates no list.
    let dropped: readonly string[] = NONE_DROPPED;
    if (
      messageId !== i ||
      kind !== k ||
      partitionKey !== p ||
      ordered !== o ||
      attemptsMade !== a ||
      replayOf !== r ||
      (history !== undefined && history.dropped > 0) ||
      (d.d !== undefined && pendingDeadLetter === undefined)
    ) {
      dropped = droppedFields(d, history?.dropped ?? 0, pendingDeadLetter);
    }
    return {
      body: d.b,
      messageId: messageId ?? jobId,
      kind: kind ?? queueKind,
      partitionKey,
      ordered: ordered ?? false,
      attemptsMade,
      history: history?.history ?? NO_HISTORY,
      pendingDeadLetter,
      replayOf,
      dropped,
    };
  }
  const body = typeof data === 'string' ? data : ((JSON.stringify(data) as string | undefined) ?? '');
  return {
    body,
    // The job id still tells this job from another with the same bytes, so their dead letters stay apart.
    messageId: jobId === '' ? undefined : jobId,
    kind: undefined,
    partitionKey: undefined,
    ordered: false,
    attemptsMade: undefined,
    history: NO_HISTORY,
    pendingDeadLetter: undefined,
    replayOf: undefined,
    dropped: NONE_DROPPED,
  };
}

/** The fields of `d` that were present but unusable, as {@link readJobData} names them. */
function droppedFields(
  d: Partial<Record<keyof JobData, unknown>>,
  droppedHistory: number,
  pendingDeadLetter: PendingDeadLetter | undefined,
): string[] {
  const checks: readonly [keyof JobData, (value: unknown) => boolean][] = [
    ['i', isString],
    ['k', isKind],
    ['p', isString],
    ['o', isBoolean],
    ['a', isAttemptCount],
    ['r', isString],
  ];
  const dropped: string[] = [];
  for (const [field, ok] of checks) {
    if (d[field] !== undefined && !ok(d[field])) dropped.push(field);
  }
  if (droppedHistory > 0) dropped.push(`h (${droppedHistory} entries)`);
  if (d.d !== undefined && pendingDeadLetter === undefined) dropped.push('d');
  return dropped;
}

const isString = (value: unknown): value is string => typeof value === 'string';
const isBoolean = (value: unknown): value is boolean => typeof value === 'boolean';
const isKind = (value: unknown): value is MessageKind =>
  value === 'command' || value === 'event' || value === 'query';
const isAttemptCount = (value: unknown): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0;
