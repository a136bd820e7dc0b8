/** How long a copy lost in an outage is remembered, in ms. */
const REMEMBER_MS = 10 * 60_000;
/** The most copies remembered; the oldest are forgotten first. */
const MAX_REMEMBERED = 10_000;
/**
 * How long after a receiver's channel opened a copy that arrives on it may have every rise of its
 * `x-delivery-count` explained by the outage, in ms. Later, only the one return the drop caused is.
 */
export const OUTAGE_WINDOW_MS = 30_000;

/** A copy a receiver held when its channel or connection dropped under it. */
interface Lost {
  /** Its quorum queue's `x-delivery-count` when it was held. */
  readonly deliveryCount: number;
  /** The returns already explained as outage returns before it was held. */
  readonly excused: number;
  readonly lostAt: number;
  /** Lost in an outage (its return is excused), not in a crash (only `excused` carries on). */
  readonly outage: boolean;
}

/**
 * The copies an outage took from this broker instance's receivers, so that when RabbitMQ gives one
 * back its `x-delivery-count` does not count the outage as an unsettled end.
 *
 * @remarks
 * A quorum queue adds 1 to a message's `x-delivery-count` each time it goes back to the queue: when
 * a consumer's process dies holding it (a crash, which must count), but also when RabbitMQ restarts
 * or the connection drops while a live process holds it (an outage, which must not). A receiver
 * whose channel drops while it is not closing {@link OutageReturns.lose | loses} what it held here.
 * When a copy of a lost message (same queue and message id) comes back to any receiver of the
 * broker, {@link OutageReturns.excuse} tells how many returns of its count the outage explains:
 *
 * - the whole rise since it was held, when it arrives at most {@link OUTAGE_WINDOW_MS} after the
 *   loss and after the channel it arrives on opened: then every return happened while this broker saw its
 *   connection down or within that window after it, which is when a restarting RabbitMQ returns a
 *   copy more than once (it may hand a returned copy to a consumer of the old connection it has not
 *   yet found gone, and take it back again);
 * - otherwise, one: the return the drop caused; any other return may be a crash elsewhere.
 *
 * A crash of another process that held the copy inside that window is excused too (it cannot be
 * told from a second outage return); the crash limit then counts from its next crash. A copy whose
 * count rose while this broker was away but that this broker never held (it went to another
 * process) is not known here and still counts: the delivery ledger is the place to close that gap
 * (docs/rabbitmq.md). Bounded: at most {@link MAX_REMEMBERED} copies, each for 10 minutes.
 */
export class OutageReturns {
  readonly #lost = new Map<string, Lost>();

  /**
   * Remembers a copy held when its channel dropped (a copy without a message id is not known): in
   * an `outage`, or in a crash, after which only the outage returns excused before carry on.
   */
  lose(
    queue: string,
    messageId: string | undefined,
    deliveryCount: number,
    excused: number,
    now: number,
    outage = true,
  ): void {
    if (messageId === undefined || (!outage && excused === 0)) return;
    const key = keyOf(queue, messageId);
    this.#lost.delete(key);
    this.#lost.set(key, { deliveryCount, excused, lostAt: now, outage });
    for (const [oldest, lost] of this.#lost) {
      if (this.#lost.size <= MAX_REMEMBERED && now - lost.lostAt <= REMEMBER_MS) break;
      this.#lost.delete(oldest);
    }
  }

  /**
   * How many of the unsettled ends in a copy's `deliveryCount` were outage returns (it is then
   * forgotten): see the class remarks for the rule. 0 for a copy never lost here.
   */
  excuse(
    queue: string,
    messageId: string | undefined,
    deliveryCount: number,
    channelOpenedAt: number,
    now: number,
  ): number {
    if (messageId === undefined) return 0;
    const key = keyOf(queue, messageId);
    const lost = this.#lost.get(key);
    if (lost === undefined) return 0;
    this.#lost.delete(key);
    const rise = deliveryCount - lost.deliveryCount;
    // Lower: a new copy (republished), whose carried ends were already corrected.
    if (now - lost.lostAt > REMEMBER_MS || rise < 0) return 0;
    if (rise === 0 || !lost.outage) return lost.excused;
    const back = Math.max(channelOpenedAt, lost.lostAt);
    return lost.excused + (now - back <= OUTAGE_WINDOW_MS ? rise : 1);
  }
}

function keyOf(queue: string, messageId: string): string {
  return `${queue}\u0000${messageId}`;
}
