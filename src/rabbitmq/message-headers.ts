import type { MessageProperties, Options } from 'amqplib';
import type { AttemptRecord, PendingDeadLetter } from '../broker/message-broker.js';
import { parseAttemptHistory, parsePendingDeadLetter } from '../broker/delivery-facts.js';
import type { MessageKind } from '../messages/definition.js';
import { isNotBeforeTime } from './delay-buckets.js';

/**
 * The delivery facts a message carries in its AMQP headers (`x-harrier-*`), never in its body.
 *
 * @remarks
 * Each republished copy (a retry, a release, the next leg of a delay) carries them on: the failed
 * attempts and their history, and the unsettled ends of the earlier copies (their quorum queue's
 * `x-delivery-count`), so the attempt number survives the copy.
 */
export interface CarriedFacts {
  readonly messageId: string | undefined;
  readonly kind: MessageKind | undefined;
  readonly type: string | undefined;
  readonly partitionKey: string | undefined;
  /** Published as an ordered message. */
  readonly ordered: boolean;
  /** Failed attempts so far (`nack` with `retryAt`). */
  readonly failures: number;
  /** Unsettled ends so far, of earlier copies and of this one. */
  readonly ends: number;
  readonly history: readonly AttemptRecord[];
  readonly pendingDeadLetter: PendingDeadLetter | undefined;
  readonly replayOf: string | undefined;
  /** Not to be handled before this time, ms since the epoch. */
  readonly notBefore: number | undefined;
  /**
   * The publish token (`createPublishToken()`) the delivery ledger knows this copy by: the same for
   * every copy of one publish, its retries and releases; a replay has a new one. None on a message
   * published without a ledger (or by foreign code): it is delivered without asking the ledger.
   */
  readonly token?: string | undefined;
  /** Published with `dedupe: 'while-queued'`: the ledger forgets the id once it is settled. */
  readonly whileQueued?: boolean;
}

const H = {
  id: 'x-harrier-id',
  kind: 'x-harrier-kind',
  type: 'x-harrier-type',
  key: 'x-harrier-key',
  ordered: 'x-harrier-ordered',
  failures: 'x-harrier-failures',
  ends: 'x-harrier-ends',
  history: 'x-harrier-history',
  pending: 'x-harrier-pending',
  replayOf: 'x-harrier-replay-of',
  notBefore: 'x-harrier-not-before',
  token: 'x-harrier-token',
  whileQueued: 'x-harrier-while-queued',
} as const;

/** A publish token as `createPublishToken` makes it and a delivery ledger accepts it. */
const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The header a delay queue's binding matches: how long the message waits in it, in ms. Not `x-`:
 * a headers exchange's `x-match: all` ignores headers starting with `x-`, so a binding on one would
 * match every message and each delay queue would get a copy.
 */
export const BUCKET_HEADER = 'harrier-bucket';

/** Longest AMQP short string (`messageId`, `type`), in UTF-8 bytes. */
const MAX_SHORT_STRING_BYTES = 255;

/**
 * The message's type as its AMQP `type` property, or undefined when it does not fit one (more than
 * 255 UTF-8 bytes: it travels in the `x-harrier-type` header then).
 */
function typeProperty(type: string | undefined): string | undefined {
  if (type === undefined) return undefined;
  // 85 UTF-16 units are at most 255 UTF-8 bytes: most types need no count.
  return type.length <= 85 || Buffer.byteLength(type, 'utf8') <= MAX_SHORT_STRING_BYTES ? type : undefined;
}

/**
 * The headers of a message carrying `facts` (numbers as strings: AMQP integer widths vary), beside
 * the AMQP properties {@link publishOptionsOf} sets: only what the properties and the defaults do
 * not say, so a command published now carries none (a publish token with a ledger).
 *
 * @remarks
 * - the message id is the `messageId` property, the type the `type` property (the header too, see
 *   below, and alone when the type is too long for the property);
 * - the kind is left out for a command and an event: each only ever travels in queues of its kind,
 *   and the receiver takes the kind of the queue (`readFacts`' `queueKind`);
 * - attempt facts at zero (failures, unsettled ends, history) and flags that are off are left out.
 *
 * An ordered message and an event still carry `x-harrier-type` too: a receiver of the version
 * before this one reads the type of a message from that header only unless its queue is a command
 * type's (a partition queue or a subscription queue holds several types), and its retry copies
 * would carry no type on; of an ordered message it also names the logical queue (the ledger's key,
 * the dead letter's identity). Receivers read both forms (the headers first), so messages queued by
 * that version are read.
 */
export function headersOf(facts: CarriedFacts): Record<string, string> | undefined {
  let headers: Record<string, string> | undefined;
  const set = (name: string, value: string): void => {
    headers ??= {};
    headers[name] = value;
  };
  if (facts.kind !== undefined && facts.kind !== 'command' && facts.kind !== 'event') set(H.kind, facts.kind);
  if (
    facts.type !== undefined &&
    (facts.ordered || facts.kind === 'event' || typeProperty(facts.type) === undefined)
  )
    set(H.type, facts.type);
  if (facts.partitionKey !== undefined) set(H.key, facts.partitionKey);
  if (facts.ordered) set(H.ordered, '1');
  if (facts.failures > 0) set(H.failures, String(facts.failures));
  if (facts.ends > 0) set(H.ends, String(facts.ends));
  if (facts.history.length > 0) set(H.history, boundedHistory(facts.history));
  if (facts.pendingDeadLetter !== undefined) {
    const { error } = facts.pendingDeadLetter;
    set(
      H.pending,
      JSON.stringify({
        ...facts.pendingDeadLetter,
        error: {
          ...error,
          message: error.message.slice(0, 2000),
          ...(error.stack !== undefined ? { stack: error.stack.slice(0, 2000) } : {}),
        },
      }),
    );
  }
  if (facts.replayOf !== undefined) set(H.replayOf, facts.replayOf);
  if (facts.notBefore !== undefined) set(H.notBefore, String(facts.notBefore));
  if (facts.token !== undefined) set(H.token, facts.token);
  if (facts.whileQueued === true) set(H.whileQueued, '1');
  return headers;
}

/** What a publish adds to the properties that carry the facts. */
export interface PublishExtras {
  /** The `timestamp` property, seconds since the epoch. */
  readonly timestamp?: number;
  /** Published `mandatory`: returned when it reaches no queue. */
  readonly mandatory?: boolean;
  /** The delay queue a publish into `<prefix>.delay` goes to (`delayBucket`): {@link BUCKET_HEADER}. */
  readonly bucket?: string;
}

/**
 * The publish options of a persistent message carrying `facts`: the `messageId` and `type`
 * properties and the headers of {@link headersOf}, in one object (amqplib reads it, never keeps it).
 */
export function publishOptionsOf(facts: CarriedFacts, extras?: PublishExtras): Options.Publish {
  const options: Options.Publish = { persistent: true };
  if (facts.messageId !== undefined) options.messageId = facts.messageId;
  const type = typeProperty(facts.type);
  if (type !== undefined) options.type = type;
  if (extras?.timestamp !== undefined) options.timestamp = extras.timestamp;
  if (extras?.mandatory === true) options.mandatory = true;
  let headers = headersOf(facts);
  if (extras?.bucket !== undefined) headers = { ...headers, [BUCKET_HEADER]: extras.bucket };
  if (headers !== undefined) options.headers = headers;
  return options;
}

/** Most UTF-8 bytes of the history header: amqplib refuses headers past 64 KiB in all. */
const MAX_HISTORY_BYTES = 32 * 1024;

/**
 * The history as JSON within {@link MAX_HISTORY_BYTES}: the stacks go first, oldest first, then the
 * error messages are cut to 500 characters.
 */
function boundedHistory(history: readonly AttemptRecord[]): string {
  let records = [...history];
  let json = JSON.stringify(records);
  for (let i = 0; i < records.length && Buffer.byteLength(json) > MAX_HISTORY_BYTES; i++) {
    const { stack: _stack, ...error } = (records[i] as AttemptRecord).error;
    records[i] = { ...(records[i] as AttemptRecord), error };
    json = JSON.stringify(records);
  }
  if (Buffer.byteLength(json) > MAX_HISTORY_BYTES) {
    records = records.map((record) => ({
      ...record,
      error: {
        ...record.error,
        name: record.error.name.slice(0, 200),
        message: record.error.message.slice(0, 500),
      },
    }));
    json = JSON.stringify(records);
  }
  return json;
}

/**
 * A quorum queue's `x-delivery-count` of a delivered message: how often it went back to its queue
 * unsettled (0 when absent or malformed).
 */
export function deliveryCountOf(properties: MessageProperties): number {
  const value = (properties.headers as Record<string, unknown> | undefined)?.['x-delivery-count'];
  const n = typeof value === 'number' ? value : Number(typeof value === 'string' ? value : Number.NaN);
  return Number.isSafeInteger(n) && n >= 0 ? n : 0;
}

/** What {@link readFacts} found: the facts, and the names of headers it had to drop as malformed. */
export interface ReadFacts {
  readonly facts: CarriedFacts;
  readonly dropped: readonly string[];
}

/**
 * Reads the facts of a delivered message from its properties and headers; never throws (they are
 * not signed: anything could be there). Reads both forms: the `x-harrier-id`, `x-harrier-type` and
 * `x-harrier-kind` headers every message carried before (they win), else the `messageId` and `type`
 * properties and `queueKind`, the kind of the queue it came from. `x-delivery-count` (set by quorum
 * queues on a message returned unsettled) adds to the unsettled ends.
 */
export function readFacts(properties: MessageProperties, queueKind?: MessageKind): ReadFacts {
  const headers = (properties.headers ?? {}) as Record<string, unknown>;
  const dropped: string[] = [];
  const text = (name: string): string | undefined => {
    const value = headers[name];
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'string') return value;
    if (Buffer.isBuffer(value)) return value.toString('utf8');
    dropped.push(name);
    return undefined;
  };
  const count = (name: string): number => {
    const value = headers[name];
    if (value === undefined || value === null) return 0;
    const n = typeof value === 'number' ? value : Number(text(name));
    if (Number.isSafeInteger(n) && n >= 0) return n;
    if (!dropped.includes(name)) dropped.push(name);
    return 0;
  };
  const json = (name: string): unknown => {
    const raw = text(name);
    if (raw === undefined) return undefined;
    try {
      return JSON.parse(raw) as unknown;
    } catch {
      dropped.push(name);
      return undefined;
    }
  };
  const kindText = text(H.kind);
  const headerKind =
    kindText === 'command' || kindText === 'event' || kindText === 'query' ? kindText : undefined;
  if (kindText !== undefined && headerKind === undefined) dropped.push(H.kind);
  const kind = headerKind ?? queueKind;
  const parsedHistory = parseAttemptHistory(json(H.history));
  if (parsedHistory.dropped > 0) dropped.push(H.history);
  const pendingRaw = json(H.pending);
  const pendingDeadLetter = parsePendingDeadLetter(pendingRaw);
  if (pendingRaw !== undefined && pendingDeadLetter === undefined) dropped.push(H.pending);
  const notBeforeText = text(H.notBefore);
  const notBefore = notBeforeText === undefined ? undefined : Number(notBeforeText);
  if (notBefore !== undefined && !isNotBeforeTime(notBefore)) dropped.push(H.notBefore);
  // An empty id or a token `createPublishToken` could not have made is refused by the delivery
  // ledger: kept, the copy would be asked about for ever; dropped, it is delivered without asking.
  const idText = text(H.id);
  if (idText === '') dropped.push(H.id);
  const propertyId =
    typeof properties.messageId === 'string' && properties.messageId !== ''
      ? properties.messageId
      : undefined;
  const messageId = idText !== undefined && idText !== '' ? idText : propertyId;
  const typeText = text(H.type);
  const type =
    typeText ?? (typeof properties.type === 'string' && properties.type !== '' ? properties.type : undefined);
  const tokenText = text(H.token);
  const token = tokenText !== undefined && TOKEN.test(tokenText) ? tokenText : undefined;
  if (tokenText !== undefined && token === undefined) dropped.push(H.token);
  return {
    facts: {
      messageId,
      kind,
      type,
      partitionKey: text(H.key),
      ordered: text(H.ordered) === '1',
      failures: count(H.failures),
      ends: count(H.ends) + count('x-delivery-count'),
      history: parsedHistory.history,
      pendingDeadLetter,
      replayOf: text(H.replayOf),
      notBefore: notBefore !== undefined && isNotBeforeTime(notBefore) ? notBefore : undefined,
      token,
      whileQueued: text(H.whileQueued) === '1',
    },
    dropped,
  };
}
