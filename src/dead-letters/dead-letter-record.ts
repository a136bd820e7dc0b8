import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import {
  MAX_ATTEMPT_HISTORY,
  type AttemptRecord,
  type DeliveryFacts,
  type ErrorInfo,
} from '../broker/message-broker.js';
import { parseAttemptHistory } from '../broker/delivery-facts.js';
import type { DeadLetterReason, DeadLetterRecord, LogPosition } from './dead-letter-store.js';

/**
 * The id of the dead letter of one message in one subscription.
 *
 * @remarks
 * The identity is the subscription (endpoint, subscription handler, and the broker's queue when it
 * names one) plus the message id, or a hash of the bytes when there is no id. A message that dies
 * again after a replay gets the same id, whatever the reason, so its record is updated; the same job
 * id in two queues never shares one.
 */
export function deadLetterId(
  endpoint: string,
  handler: string | undefined,
  messageId: string | undefined,
  body: string,
  queue?: string,
): string {
  const identity = messageId ?? `body:${createHash('sha256').update(body).digest('hex')}`;
  // The queue is appended only when known, so records of brokers that name none keep their ids.
  const where = queue === undefined ? '' : `\u0000queue:${queue}`;
  return createHash('sha256')
    .update(`${endpoint}\u0000${handler ?? ''}\u0000${identity}${where}`)
    .digest('hex')
    .slice(0, 32);
}

const FRAME = /^\s*at (?:.*? \()?(.*?):\d+:\d+\)?$/;

/** Harrier's own folder (src/ or dist/): its frames are never the application's. */
const HARRIER_ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Groups alike failures: a short hash of the error name and the first stack frame that belongs to the
 * application (not Node internals, not node_modules, not Harrier itself).
 */
export function fingerprintOf(error: ErrorInfo): string {
  let frame = '';
  for (const line of (error.stack ?? '').split('\n').slice(1)) {
    const match = FRAME.exec(line);
    if (match === null) continue;
    const location = match[1] ?? '';
    const path = location.startsWith('file://') ? fileURLToPath(location) : location;
    if (path.startsWith('node:') || path.includes('/node_modules/') || path.startsWith(HARRIER_ROOT))
      continue;
    frame = line.trim().replace(/:\d+:\d+\)?$/, '');
    break;
  }
  return createHash('sha256').update(`${error.name}\u0000${frame}`).digest('hex').slice(0, 12);
}

/** What is known when a delivery is dead-lettered. */
export interface DeadLetterInput {
  readonly body: string;
  readonly facts: DeliveryFacts;
  readonly handler: string | undefined;
  readonly reason: DeadLetterReason;
  readonly error: ErrorInfo;
  /** Whether the message's definition is ordered (false when unknown). */
  readonly ordered: boolean;
  readonly now: number;
  /** Where a projection fed from an event log met the event. @defaultValue undefined */
  readonly logPosition?: LogPosition | undefined;
}

/** Builds the record of a delivery that is dead-lettered now, its last failure included in the history. */
export function buildDeadLetterRecord(input: DeadLetterInput): DeadLetterRecord {
  const { facts } = input;
  const last: AttemptRecord = { attempt: facts.attempt, at: input.now, error: input.error };
  // The history travelled beside the envelope, outside its signature: keep only well-formed entries.
  const attempts = [...parseAttemptHistory(facts.history).history, last].slice(-MAX_ATTEMPT_HISTORY);
  return {
    // The subscription's handler (facts.handler, undefined for a command queue), not the handler
    // routing found, so the id is the same whether the message died before or after routing.
    id: deadLetterId(facts.endpoint, facts.handler, facts.messageId, input.body, facts.queue),
    messageId: facts.messageId,
    kind: facts.kind,
    type: facts.type,
    endpoint: facts.endpoint,
    handler: input.handler,
    reason: input.reason,
    error: input.error,
    attempts,
    attemptCount: facts.attempt,
    firstFailedAt: attempts[0]?.at ?? input.now,
    lastFailedAt: input.now,
    fingerprint: fingerprintOf(input.error),
    envelope: input.body,
    partitionKey: facts.partitionKey,
    ordered: input.ordered,
    ...(input.logPosition !== undefined ? { logPosition: { ...input.logPosition } } : {}),
    status: 'dead',
    replays: [],
  };
}
