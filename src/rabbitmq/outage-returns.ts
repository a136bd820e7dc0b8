import type { CarriedFacts } from './message-headers.js';

/** The most copies remembered; the oldest are forgotten first. */
const MAX_REMEMBERED = 10_000;
/**
 * How long a copy lost here is remembered, in ms: a copy back later (an outage that long, or a
 * copy that went to another process and came back from a crash there) has its return counted.
 */
export const REMEMBER_MS = 60 * 60_000;
/**
 * The most returns of one copy excused as outage returns, in all: beyond, every return counts as
 * an unsettled end again. A connection drop the handler causes itself (an event loop blocked past
 * twice the heartbeat) cannot be told from an outage, so without a bound a message whose every
 * delivery drops its connection would run for ever; with it, such a message reaches the crash
 * limit after at most this many excused returns.
 */
export const MAX_EXCUSED_ENDS = 5;
/**
 * How long after a receiver's channel opened a copy that arrives on it may have every rise of its
 * `x-delivery-count` explained by the outage, in ms. Later, only the one return the drop caused is.
 */
export const OUTAGE_WINDOW_MS = 30_000;

/** What is known of a copy's latest loss, here or in the delivery ledger (`OutageLoss`). */
export interface Loss {
  /** Its quorum queue's `x-delivery-count` when it was held. */
  readonly deliveryCount: number;
  /** The returns already excused as outage returns before it was held. */
  readonly excusedEnds: number;
  /** How long ago it was lost, in ms. */
  readonly msAgo: number;
  /** Lost in an outage (its return is excused), not in a crash (only `excusedEnds` carry on). */
  readonly outage: boolean;
}

/**
 * How many of the unsettled ends in a copy's `deliveryCount` were outage returns, given its latest
 * `loss` and how long ago the channel it arrived on opened (the rule of {@link OutageReturns}):
 * - the whole rise since it was held, when it arrives at most {@link OUTAGE_WINDOW_MS} after the
 *   later of the loss and the opening of that channel: every return then happened while its
 *   receivers saw their connection down or within that window after it, which is when a restarting
 *   RabbitMQ returns a copy more than once (it may hand a returned copy to a consumer of the old
 *   connection it has not yet found gone, and take it back again);
 * - otherwise one, the return the drop caused: any other return may be a crash elsewhere;
 * - plus the returns excused before the loss; none for a lower count (a new copy, republished,
 *   whose carried ends were corrected already);
 * - at most {@link MAX_EXCUSED_ENDS} in all.
 */
export function excusedEnds(loss: Loss, deliveryCount: number, msSinceChannelOpened: number): number {
  return Math.min(MAX_EXCUSED_ENDS, outageEnds(loss, deliveryCount, msSinceChannelOpened));
}

/**
 * The returns the rule of {@link excusedEnds} explains, before the bound of
 * {@link MAX_EXCUSED_ENDS}: more than that bound means a return that counts although it may have
 * been an outage (worth a warning).
 */
export function outageEnds(loss: Loss, deliveryCount: number, msSinceChannelOpened: number): number {
  const rise = deliveryCount - loss.deliveryCount;
  if (rise < 0) return 0;
  if (rise === 0 || !loss.outage) return loss.excusedEnds;
  const sinceBack = Math.min(loss.msAgo, msSinceChannelOpened);
  return loss.excusedEnds + (sinceBack <= OUTAGE_WINDOW_MS ? rise : 1);
}

/** A copy a receiver held when its channel or connection dropped under it. */
interface Lost {
  readonly deliveryCount: number;
  readonly excusedEnds: number;
  readonly lostAt: number;
  readonly outage: boolean;
  /** Its publish token and its facts then (an ordered retry's failures live only in its receiver). */
  readonly token: string | undefined;
  readonly facts: CarriedFacts | undefined;
}

/** What {@link OutageReturns.excuse} tells of a copy that came back. */
export interface Returned {
  /** The unsettled ends of its count that outages explain. */
  readonly excused: number;
  /** Outages explain more returns than {@link MAX_EXCUSED_ENDS}: the rest count. */
  readonly capped: boolean;
  /**
   * The facts it had when it was lost (a retry held by its receiver moved them on), for the same
   * message come back (`redelivered`, same token) after an outage; else undefined.
   */
  readonly facts: CarriedFacts | undefined;
}

/**
 * The copies an outage took from this broker instance's receivers, so that when RabbitMQ gives one
 * back its `x-delivery-count` does not count the outage as an unsettled end, and its facts (an
 * ordered message's failed attempts since it was taken) carry on.
 *
 * @remarks
 * A quorum queue adds 1 to a message's `x-delivery-count` each time it goes back to the queue: when
 * a consumer's process dies holding it (a crash, which must count), but also when RabbitMQ restarts
 * or the connection drops while a live process holds it (an outage, which must not). A receiver
 * whose channel drops while it is not closing {@link OutageReturns.lose | loses} what it held here.
 * When a copy of a lost message (same queue and message id) comes back to any receiver of the
 * broker, {@link OutageReturns.excuse} tells how many returns of its count the outage explains, by
 * the rule of {@link excusedEnds}.
 *
 * A crash of another process that held the copy inside the window is excused too (it cannot be
 * told from a second outage return); the crash limit then counts from its next crash. A copy that
 * goes to another process is not known there: with a delivery ledger the receiver also records the
 * loss on the copy's ledger entry (`DeliveryLedger.lost`), where any process finds it
 * (docs/rabbitmq.md). Bounded: at most {@link MAX_REMEMBERED} copies, the oldest forgotten first,
 * each for {@link REMEMBER_MS}.
 */
export class OutageReturns {
  readonly #lost = new Map<string, Lost>();

  /**
   * Remembers a copy held when its channel dropped (a copy without a message id is not known): in
   * an `outage`, or in a crash, after which only the outage returns excused before carry on (and
   * not its facts).
   */
  lose(
    queue: string,
    messageId: string | undefined,
    deliveryCount: number,
    excused: number,
    now: number,
    outage = true,
    held?: { readonly token: string | undefined; readonly facts: CarriedFacts },
  ): void {
    if (messageId === undefined || (!outage && excused === 0)) return;
    const key = keyOf(queue, messageId);
    this.#lost.delete(key);
    this.#lost.set(key, {
      deliveryCount,
      excusedEnds: excused,
      lostAt: now,
      outage,
      token: held?.token,
      facts: outage ? held?.facts : undefined,
    });
    for (const [oldest, lost] of this.#lost) {
      if (this.#lost.size <= MAX_REMEMBERED && now - lost.lostAt <= REMEMBER_MS) break;
      this.#lost.delete(oldest);
    }
  }

  /**
   * What the outage explains of a copy come back (it is then forgotten): the returns excused (0 for
   * a copy never lost here) and, for the same token, the facts it had. Only a copy RabbitMQ
   * delivered before (`redelivered`) has returns of its own: another copy of the message id (one
   * published again after a refused publish that RabbitMQ had stored, a retry published as the
   * channel dropped) excuses nothing and leaves the lost copy remembered for its return, and so
   * does a copy with another publish token than the lost one (both known). A copy lost more than
   * {@link REMEMBER_MS} ago is forgotten and excuses nothing.
   */
  excuse(
    queue: string,
    messageId: string | undefined,
    deliveryCount: number,
    channelOpenedAt: number,
    now: number,
    copy: { readonly token: string | undefined; readonly redelivered: boolean },
  ): Returned {
    if (messageId === undefined || !copy.redelivered) return NOTHING;
    const key = keyOf(queue, messageId);
    const lost = this.#lost.get(key);
    if (lost === undefined) return NOTHING;
    if (lost.token !== undefined && copy.token !== undefined && lost.token !== copy.token) return NOTHING;
    this.#lost.delete(key);
    if (now - lost.lostAt > REMEMBER_MS) return NOTHING;
    const loss = { ...lost, msAgo: Math.max(0, now - lost.lostAt) };
    const sinceOpened = Math.max(0, now - channelOpenedAt);
    const excused = excusedEnds(loss, deliveryCount, sinceOpened);
    return {
      excused,
      capped: outageEnds(loss, deliveryCount, sinceOpened) > MAX_EXCUSED_ENDS,
      facts: lost.token === copy.token ? lost.facts : undefined,
    };
  }
}

const NOTHING: Returned = { excused: 0, capped: false, facts: undefined };

function keyOf(queue: string, messageId: string): string {
  return `${queue}\u0000${messageId}`;
}
