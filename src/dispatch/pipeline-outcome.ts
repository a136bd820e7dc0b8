import type { ErrorInfo, OutgoingMessage } from '../broker/message-broker.js';
import type { DeadLetterReason } from '../dead-letters/dead-letter-store.js';
import type { HandlerKind } from '../handlers/handler-metadata.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import type { Envelope } from '../messages/envelope.js';

/** How a run through the {@link HandlerPipeline} ended; the caller settles it. */
export type PipelineOutcome =
  HandledOutcome | RetryOutcome | DeadLetterOutcome | AbandonedOutcome | PausedOutcome;

/** The handler succeeded and what it recorded was committed. */
export interface HandledOutcome {
  readonly kind: 'handled';
  readonly envelope: Envelope;
  readonly handler: string;
  readonly attempt: number;
  /** When the handler call started (clock time), for `durationMs`. */
  readonly startedAt: number;
  /** The messages the handler recorded, committed through the publisher. */
  readonly outgoing: readonly OutgoingMessage[];
}

/** The handler failed and may succeed later. */
export interface RetryOutcome {
  readonly kind: 'retry';
  readonly envelope: Envelope;
  readonly handler: string;
  readonly attempt: number;
  /** When to try again (clock time). */
  readonly retryAt: number;
  readonly error: unknown;
  readonly errorInfo: ErrorInfo;
  /**
   * The message is not at fault and spent no attempt (it is newer than this code): the broker gives
   * it back released until `retryAt`, its attempt counter unmoved.
   * @defaultValue false
   */
  readonly uncounted?: boolean;
}

/** The message is refused for good: bad input, no handler, or a handler out of attempts. */
export interface DeadLetterOutcome {
  readonly kind: 'dead-letter';
  readonly reason: DeadLetterReason;
  /** The handler the message died in, when one was found. */
  readonly handler: string | undefined;
  readonly error: ErrorInfo;
  /** The error thrown, or the description of the bad input. */
  readonly thrown: unknown;
  /** Whether the message's definition asks for per-key order. */
  readonly ordered: boolean;
  /** The decoded envelope, when decoding got that far. */
  readonly envelope: Envelope | undefined;
}

/** The run was abandoned (see {@link PipelineInput.abandoned}): nothing to settle. */
export interface AbandonedOutcome {
  readonly kind: 'abandoned';
}

/**
 * The attempt met an outage of a dependency (see `isTransientFailure`): the message is not at fault.
 * The caller gives the delivery back with its attempt uncounted and pauses.
 */
export interface PausedOutcome {
  readonly kind: 'paused';
  readonly envelope: Envelope;
  readonly handler: string;
  readonly attempt: number;
  readonly error: unknown;
  readonly errorInfo: ErrorInfo;
  /**
   * The outcome as a failure of the message (a retry that counts, or a dead letter once out of
   * attempts): what the caller settles instead when it finds the message itself at fault (it keeps
   * meeting the "outage" while other messages get through).
   */
  readonly failure: () => RetryOutcome | DeadLetterOutcome;
}

/** The one abandoned outcome: it carries nothing, so every abandoned run shares it. */
export const ABANDONED: AbandonedOutcome = { kind: 'abandoned' };

/** What a handler that recorded nothing committed: one frozen array rather than one per message. */
export const NO_OUTGOING: readonly OutgoingMessage[] = Object.freeze([]);

/** The dead-letter reason of a handler that failed for good, by handler kind. */
export function failureReason(kind: HandlerKind): DeadLetterReason {
  return kind === 'projection' ? 'projection-failed' : 'handler-failed';
}

/** The outcome of an attempt whose handler succeeded, with what it committed. */
export function handledOutcome(
  entry: HandlerEntry,
  envelope: Envelope,
  attempt: number,
  startedAt: number,
  outgoing: readonly OutgoingMessage[],
): HandledOutcome {
  return { kind: 'handled', envelope, handler: entry.name, attempt, startedAt, outgoing };
}

/** The outcome of a message refused for good, before a handler ran or after it failed. */
export function refused(
  handler: string | undefined,
  reason: DeadLetterReason,
  error: ErrorInfo,
  ordered: boolean,
  envelope: Envelope | undefined,
  thrown: unknown = error,
): DeadLetterOutcome {
  return { kind: 'dead-letter', reason, handler, error, thrown, ordered, envelope };
}
