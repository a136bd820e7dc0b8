import type { DeadLetterRecord } from '../dead-letters/dead-letter-store.js';
import type { Envelope } from '../messages/envelope.js';
import type { PausedEvent, ResumedEvent } from './outage-breaker.js';

/**
 * Lifecycle hooks of every handler run (command and event handlers, projections); an error thrown
 * by a hook, or the rejection of an async one (TypeScript lets an async function stand for a `void`
 * one), is logged and ignored; nothing waits for an async hook.
 */
export interface DispatchHooks {
  onHandled?(event: HandledEvent): void;
  onRetrying?(event: RetryingEvent): void;
  onDeadLettered?(event: DeadLetteredEvent): void;
  /** The endpoint, or a projection lane, paused: a dependency is unreachable (see `TransientError`). */
  onPaused?(event: PausedEvent): void;
  /** A paused endpoint or projection lane got a message through and takes messages again. */
  onResumed?(event: ResumedEvent): void;
}

/** A message was handled (and, from the broker, acknowledged). */
export interface HandledEvent {
  readonly envelope: Envelope;
  readonly handler: string;
  readonly attempt: number;
  readonly durationMs: number;
}

/** A handler failed and its message will be tried again. */
export interface RetryingEvent {
  readonly envelope: Envelope;
  readonly handler: string;
  readonly attempt: number;
  readonly error: unknown;
  readonly retryAt: number;
}

/** A message was dead-lettered. */
export interface DeadLetteredEvent {
  readonly record: DeadLetterRecord;
  /** The error thrown, or a description of the bad input. */
  readonly error: unknown;
}
