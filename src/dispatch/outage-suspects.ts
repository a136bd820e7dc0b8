import type { Delivery } from '../broker/message-broker.js';
import type { Logger } from '../logging/logger.js';
import type { InFlight } from './in-flight.js';
import type { OutageBreaker } from './outage-breaker.js';
import type { DeadLetterOutcome, PausedOutcome, RetryOutcome } from './pipeline-outcome.js';

/**
 * Decides whether an attempt that met an outage is the outage's (the endpoint pauses) or the
 * message's own failure, by the messages that met one before.
 *
 * @remarks
 * A message may be at fault itself while its failure looks like an outage: a handler calling a
 * host that only this message names, a query that makes the database end its session. Its attempt
 * counts, so it retries with backoff and dead-letters at the end instead of pausing the endpoint at
 * every probe for ever, when it meets the "outage" again after the endpoint resumed in between
 * (other messages got through), or when it was the probe `maxProbesPerMessage` times in a row (it
 * stays at the head of its queue, so no other message can show that the dependency answers). The
 * memory of such messages is this process's, bounded to {@link MAX_OUTAGE_SUSPECTS}.
 */
export class OutageSuspects {
  readonly #breaker: OutageBreaker;
  readonly #logger: Logger;
  readonly #maxProbesPerMessage: number;
  /**
   * Messages that met an outage, by message id and handler, with the breaker's generation then: one
   * that meets it again after the endpoint resumed is at fault itself.
   */
  readonly #suspects = new Map<string, { generation: number; probes: number }>();

  constructor(breaker: OutageBreaker, logger: Logger, maxProbesPerMessage: number) {
    this.#breaker = breaker;
    this.#logger = logger;
    this.#maxProbesPerMessage = maxProbesPerMessage;
  }

  /**
   * Decides what an attempt that met an outage means: undefined when it is an outage (the breaker
   * trips and the endpoint pauses), or the message's failure to settle instead.
   */
  paused(flight: InFlight, outcome: PausedOutcome): RetryOutcome | DeadLetterOutcome | undefined {
    const key = suspectKey(flight.delivery);
    const seen = this.#suspects.get(key);
    const generation = this.#breaker.generation;
    const probes = (seen?.probes ?? 0) + (flight.probe ? 1 : 0);
    const resumedSince = seen !== undefined && seen.generation !== generation;
    this.#suspects.delete(key);
    if (resumedSince || probes >= this.#maxProbesPerMessage) {
      this.#suspects.set(key, { generation, probes: 0 });
      this.#logger.warn(
        resumedSince
          ? 'A message keeps meeting an outage that other messages got through: its attempt counts'
          : 'A message probed an outage too many times in a row: its attempt counts',
        {
          handler: outcome.handler,
          messageId: outcome.envelope.id,
          attempt: outcome.attempt,
          error: outcome.errorInfo.message,
        },
      );
      return outcome.failure();
    }
    this.#suspects.set(key, { generation, probes });
    if (this.#suspects.size > MAX_OUTAGE_SUSPECTS) {
      const oldest = this.#suspects.keys().next();
      if (oldest.done !== true) this.#suspects.delete(oldest.value);
    }
    this.#breaker.tripped(outcome.error);
    return undefined;
  }

  /** Forgets a message that got through (handled). */
  forget(delivery: Delivery): void {
    if (this.#suspects.size > 0) this.#suspects.delete(suspectKey(delivery));
  }
}

/** Most messages whose meeting with an outage is remembered. */
const MAX_OUTAGE_SUSPECTS = 10_000;

/** A message's identity in one subscription, for the memory of outages it met. */
function suspectKey(delivery: Delivery): string {
  const { facts } = delivery;
  return `${facts.handler ?? ''}\u0000${facts.messageId ?? delivery.id}`;
}
