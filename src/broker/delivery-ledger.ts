import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock/clock.js';

/**
 * One copy of a message in one queue, as a {@link DeliveryLedger} knows it.
 *
 * @remarks
 * The token is what tells two publishes of one message id apart: the broker stamps a fresh one on
 * every publish and every replay (`redeliver`), and keeps it on everything that carries the same
 * copy on (a retry, a release, a redelivery after a crash).
 */
export interface LedgerCopy {
  /** The copy's queue, as `DeliveryFacts.queue` names it (`cmd~<type>`, `evt~<endpoint>~<handler>`). */
  readonly queue: string;
  readonly messageId: string;
  /** The publish token the copy carries (see {@link createPublishToken}). */
  readonly token: string;
}

/**
 * What a receiver does with a copy it took from its queue, as {@link DeliveryLedger.admit} decides.
 * - `deliver`: hand it to the dispatcher.
 * - `duplicate`: another publish of the id was delivered to this queue within the window, or this
 *   copy was handled already: settle it with the driver (ack) and drop it.
 * - `cancelled`: the copy was scheduled and then cancelled (`cancel`): ack and drop it.
 */
export type AdmitVerdict = 'deliver' | 'duplicate' | 'cancelled';

/**
 * What {@link DeliveryLedger.replace} found in the queue.
 * - `replaced`: nothing the queue holds: publish the replay with the new token, it is delivered.
 * - `held`: the queue holds a copy waiting to be delivered again (a retry, a release): nothing to do,
 *   that copy is delivered with its attempts as they are.
 * - `in-flight`: a copy is delivered and not settled yet: wait and ask again, then give up
 *   (`message-in-flight`).
 */
export type ReplaceOutcome = 'replaced' | 'held' | 'in-flight';

/**
 * How a delivered copy was settled, for {@link DeliveryLedger.settle}.
 * - `waiting`: it goes back to its queue (`nack` with `retryAt`, or `release`).
 * - `done`: it is never delivered again (acked, or dead-lettered).
 */
export type LedgerSettlement = 'waiting' | 'done';

/**
 * The memory a broker without deduplication or removal of queued messages keeps beside its queues,
 * to drop a second publish of a message id (idempotent publish) and to take back a scheduled message
 * (`cancel`).
 *
 * @remarks
 * The broker stamps a fresh token on every publish and asks the ledger, for each copy a receiver
 * takes, whether to deliver it: the first token of a message id in a queue wins for `windowMs`, and
 * copies with another token are duplicates. Every call is one atomic step of the store (one Lua
 * script, one SQL statement), so a copy is either delivered or cancelled, never both, and two
 * processes never both deliver a message id. Times come from the ledger's clock. A record is
 * remembered `windowMs` after the last call that touched it; a scheduled copy until its
 * `deliverAt` and the ledger's retention after it. See docs/architecture.md.
 *
 * Implementations: `InMemoryDeliveryLedger` (`harrier/extend`), `RedisDeliveryLedger`
 * (`harrier/redis`), `PostgresDeliveryLedger` (`harrier/postgres`); each passes
 * `describeDeliveryLedgerConformance` (`harrier/testing/conformance`).
 */
export interface DeliveryLedger {
  /**
   * Decides whether a receiver delivers the copy it took: `cancelled` for a copy recorded by
   * {@link DeliveryLedger.scheduled} and cancelled since; else `deliver` when no other token of the
   * message id is remembered in the queue (the token is then remembered, and the copy counts as in
   * flight) or when the same token is, not settled `done` (a retry, a release, a redelivery after a
   * crash); else `duplicate`. A scheduled copy admitted is taken: `cancel` no longer counts it.
   * @throws HarrierError `invalid-argument` for an empty queue or message id, a token that is not
   *   1 to 64 letters, digits, `-` or `_`, or a window that is not a whole number of ms >= 0;
   *   `store-closed` after {@link DeliveryLedger.close}.
   */
  admit(copy: LedgerCopy, windowMs: number): Promise<AdmitVerdict>;
  /**
   * Records how the delivery of an admitted copy was settled, and remembers the id `windowMs` more;
   * forgets a loss recorded for the queue's copy ({@link DeliveryLedger.lost}).
   * Call it before the driver's ack (a crash in between redelivers the copy, which `admit` then
   * calls a `duplicate` when it was `done`).
   * @returns false, changing nothing, when the queue remembers another token, none, or `done`.
   */
  settle(copy: LedgerCopy, settlement: LedgerSettlement, windowMs: number): Promise<boolean>;
  /**
   * Makes a replay's token the one the queue delivers (`redeliver`), unless the queue holds the
   * message: `held` for a copy waiting to be delivered again, `in-flight` for one delivered and not
   * settled; else `replaced`, and the replay's copy is delivered while every other token is a
   * duplicate.
   */
  replace(copy: LedgerCopy, windowMs: number): Promise<ReplaceOutcome>;
  /**
   * Records the copies of a message published with a `deliverAt`, one per queue it was sent to,
   * before the broker publishes it, so {@link DeliveryLedger.cancel} can count and take them back.
   * Recording the same copies again changes nothing.
   */
  scheduled(messageId: string, token: string, queues: readonly string[], deliverAt: number): Promise<void>;
  /**
   * Cancels the recorded copies of a message that were not admitted yet and whose `deliverAt` is
   * still to come (a copy due already is left to be delivered); resolves to the number of queues whose
   * copy it cancelled, not counting a queue that delivered the id from another publish. Each cancelled
   * copy is then `cancelled` when taken; the id is not remembered for it, so a later publish of the
   * id is delivered. Unknown ids resolve to 0.
   */
  cancel(messageId: string): Promise<number>;
  /**
   * Records that each copy was lost in an outage (see {@link LostCopy}), beside the entry of the
   * copy's queue and message id, for whichever process takes it next
   * ({@link DeliveryLedger.takeLoss}), also a copy not admitted yet (held by a receiver, waiting for
   * its turn). A copy is not recorded when the queue delivers another token of the message id (it is
   * a duplicate), settled its token `done`, or admitted it after its `droppedAt`. The record lasts
   * `windowMs`; a later loss of the queue's copy replaces it (over a loss of the same token not
   * taken yet, keeping the ends that one excused and the returns since:
   * max(new excusedEnds, old excusedEnds + new deliveryCount - old deliveryCount)), and
   * {@link DeliveryLedger.settle} forgets it. Recording the same loss again changes nothing.
   * @returns how many copies were recorded.
   * @throws HarrierError `invalid-argument` as `admit`, for a count that is not a whole number from 0
   *   to 2^31 - 1, or a `droppedAt` that is not a whole number >= 0.
   */
  lost(copies: readonly LostCopy[], windowMs: number): Promise<number>;
  /**
   * The latest loss recorded by {@link DeliveryLedger.lost} for this copy (same queue, message id
   * and token), and forgets it: undefined when none is recorded. A receiver asks for it when it
   * takes a copy its queue has returned before, to leave the outage returns out of its unsettled
   * ends.
   */
  takeLoss(copy: LedgerCopy): Promise<OutageLoss | undefined>;
  /** Releases the ledger's connections; every later call rejects with `store-closed`. */
  close(): Promise<void>;
}

/**
 * A copy a receiver held (taken, not settled) when its channel or connection dropped while its
 * process lived: RabbitMQ returns it to its queue, and that return is an outage, not a crash.
 */
export interface LostCopy extends LedgerCopy {
  /** The queue's count of the copy's returns (`x-delivery-count`) when the receiver held it, >= 0. */
  readonly deliveryCount: number;
  /** The returns already left out of its unsettled ends as outage returns when it was held, >= 0. */
  readonly excusedEnds: number;
  /**
   * When its channel dropped, by the ledger's clock (ms since the epoch; default: now). The loss is
   * recorded as of then ({@link OutageLoss.msAgo}), and not at all when a receiver admitted the
   * copy after it (the copy was taken back already: a late record would excuse a later crash).
   */
  readonly droppedAt?: number;
}

/** What {@link DeliveryLedger.takeLoss} knows of a copy's latest loss in an outage. */
export interface OutageLoss {
  /** As {@link LostCopy.deliveryCount}. */
  readonly deliveryCount: number;
  /** As {@link LostCopy.excusedEnds}. */
  readonly excusedEnds: number;
  /** How long ago, by the ledger's clock, the copy was lost (its `droppedAt`; ms, >= 0). */
  readonly msAgo: number;
}

/** Options every ledger takes beside its connection. */
export interface DeliveryLedgerOptions {
  /**
   * The clock every window and `deliverAt` is measured by (a `ManualClock` in tests).
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
  /**
   * How long after its `deliverAt` a scheduled copy's record is kept: a copy delivered later than
   * that (its consumers were down) is no longer known to be cancelled.
   * @defaultValue 604800000 (7 days)
   */
  readonly scheduledRetentionMs?: number;
}

/** Default of {@link DeliveryLedgerOptions.scheduledRetentionMs}: 7 days. */
export const DEFAULT_SCHEDULED_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

/** A fresh publish token: 22 URL-safe characters, from 128 random bits. */
export function createPublishToken(): string {
  return randomBytes(16).toString('base64url');
}
