import { toErrorInfo, type ErrorInfo, type PendingDeadLetter } from '../broker/message-broker.js';
import type { Clock } from '../clock/clock.js';
import { buildDeadLetterRecord } from '../dead-letters/dead-letter-record.js';
import type {
  DeadLetterReason,
  DeadLetterRecord,
  DeadLetterStore,
} from '../dead-letters/dead-letter-store.js';
import type { Logger } from '../logging/logger.js';
import { SEND_BACK_RETRY, type DeliverySettler, type SettleStep } from './delivery-settler.js';
import type { InFlight } from './in-flight.js';
import { backoffDelay } from './retry-policy.js';

/**
 * Records a delivery's dead letter in the store, then ends the delivery on the broker; and records
 * that a replayed dead letter was handled.
 *
 * @remarks
 * A store that fails or hangs must not hold the delivery: after {@link DEAD_LETTER_STORE_TRIES}
 * tries it goes back to its queue with backoff, the decision carried beside it, and a later delivery
 * records the dead letter without running the handler again. The endpoint does not pause for it:
 * messages that do not fail need no store.
 */
export class DeadLetterRecorder {
  readonly #store: DeadLetterStore;
  readonly #settler: DeliverySettler;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #random: (() => number) | undefined;
  readonly #listener: DeadLetterListener;

  constructor(
    store: DeadLetterStore,
    settler: DeliverySettler,
    clock: Clock,
    logger: Logger,
    random: (() => number) | undefined,
    listener: DeadLetterListener,
  ) {
    this.#store = store;
    this.#settler = settler;
    this.#clock = clock;
    this.#logger = logger;
    this.#random = random;
    this.#listener = listener;
  }

  /**
   * Dead-letters a delivery: stores its record, then nacks it for good; or, when the store failed,
   * sends it back with the decision (see the class remarks). Never throws.
   *
   * @param pending - the decision an earlier delivery made and could not record: recorded as it was
   *   decided (its attempt and time), not as this redelivery.
   */
  async record(
    flight: InFlight,
    handler: string | undefined,
    reason: DeadLetterReason,
    error: ErrorInfo,
    ordered: boolean,
    thrown: unknown = error,
    pending?: PendingDeadLetter,
  ): Promise<void> {
    const { delivery } = flight;
    const { facts } = delivery;
    const record = buildDeadLetterRecord({
      body: delivery.body,
      // A pending dead-lettering is recorded as it was decided: its attempt, not this redelivery's.
      facts: pending === undefined ? facts : { ...facts, attempt: pending.attempt },
      handler,
      reason,
      error,
      ordered,
      now: pending?.at ?? this.#clock.now(),
    });
    this.#logger.warn('Message dead-lettered', {
      reason,
      handler,
      type: record.type,
      messageId: record.messageId,
      error: error.message,
    });
    flight.decided = pending ?? {
      reason,
      attempt: facts.attempt,
      at: record.lastFailedAt,
      error,
      ...(handler !== undefined ? { handler } : {}),
    };
    const stored = await this.#settler.run(flight, STORE_DEAD_LETTER, () => this.#store.add(record));
    if (stored === 'stale' || flight.released) return;
    if (stored === 'failed') {
      // The dead-letter store is unreachable. The endpoint does not pause for it: messages that do
      // not fail need no store, and this one waits in its queue with the decision beside it.
      // Never hold the delivery: it goes back to its queue with backoff, the decision kept beside it,
      // and a later delivery records the dead letter (the handler does not run again).
      const failures = pending === undefined ? 1 : Math.max(1, facts.attempt - pending.attempt + 1);
      const retryAt = this.#clock.now() + backoffDelay(SEND_BACK_RETRY, failures, this.#random);
      this.#logger.error('The dead letter could not be stored; the message goes back to its queue', {
        deliveryId: delivery.id,
        messageId: record.messageId,
        reason,
        retryAt,
      });
      await this.#settler.retryWithDecision(flight, retryAt);
      return;
    }
    this.#listener.storeAnswered();
    await this.#settler.deadLettered(flight, reason, error);
    this.#listener.deadLettered(record, thrown);
  }

  /**
   * Records in the dead-letter store that the replayed dead letter `id` was handled; best effort:
   * never throws and never changes how the delivery settled (it is acked already).
   *
   * @remarks
   * The replay sends the message back before it marks the record replayed (so a crash never leaves a
   * record marked with nothing sent), so a fast consumer can get here first and find the record
   * still `dead`: the mark is tried again a few times, briefly, before it gives up and the replay
   * shows as pending.
   */
  async markReplayHandled(flight: InFlight, id: string): Promise<void> {
    const store = this.#store;
    if (store.markReplayHandled === undefined) return;
    let pause = MARK_HANDLED_PAUSE_MS;
    for (let attempt = 1; ; attempt++) {
      let marked: boolean;
      try {
        marked = await this.#settler.bounded(
          store.markReplayHandled(id, this.#clock.now()),
          MARK_REPLAY_HANDLED,
        );
      } catch (error) {
        this.#logger.warn(
          'Could not record that a replayed message was handled; its replay shows as pending',
          {
            deadLetterId: id,
            deliveryId: flight.delivery.id,
            error: toErrorInfo(error),
          },
        );
        return;
      }
      if (marked) return;
      // A removed record will not appear by waiting; a record still `dead` may be one whose replay
      // mark has not landed yet, and one marked meanwhile is tried again at once.
      const status =
        attempt < MARK_REPLAY_HANDLED.tries && !flight.released
          ? await store.get(id).then(
              (record) => record?.status,
              () => undefined,
            )
          : undefined;
      if (status === undefined) {
        this.#logger.debug('A replayed message was handled but its dead letter is not marked replayed', {
          deadLetterId: id,
          deliveryId: flight.delivery.id,
        });
        return;
      }
      if (status === 'replayed') continue;
      // Counted as a settle wait, so a test clock moves on for it as for a settle retry.
      await this.#settler.pause(flight, MARK_REPLAY_HANDLED, pause);
      pause *= 2;
    }
  }
}

/** What the {@link DeadLetterRecorder} tells its dispatcher. */
export interface DeadLetterListener {
  /** The store answered: a dependency of the endpoint did (an outage breaker hears of it). */
  storeAnswered(): void;
  /** The dead letter is stored and its delivery settled (the `onDeadLettered` hook). */
  deadLettered(record: DeadLetterRecord, thrown: unknown): void;
}

/**
 * Tries of storing a dead letter before the delivery goes back to its queue with backoff, the
 * dead-lettering kept beside it for the next delivery to record.
 */
export const DEAD_LETTER_STORE_TRIES = 3;

/** Storing a dead letter: it settles nothing on the broker, so a dispatcher failure after it still nacks. */
const STORE_DEAD_LETTER: SettleStep = {
  name: 'dead-letter store',
  tries: DEAD_LETTER_STORE_TRIES,
  settlesOnBroker: false,
  endsOnRelease: true,
};

/**
 * Marking a replay handled, tried while its record is not marked replayed yet, with a first pause
 * between tries that doubles: the replay marks the record right after it sent the message back.
 */
const MARK_REPLAY_HANDLED: SettleStep = {
  name: 'marking the replay handled',
  tries: 5,
  settlesOnBroker: false,
  endsOnRelease: true,
};
const MARK_HANDLED_PAUSE_MS = 50;
