import type { Clock } from './clock.js';

/** The longest delay a Node timer takes as given (2^31 - 1 ms, about 24.8 days). */
export const MAX_TIMER_MS = 2_147_483_647;

/** One pending time-out of {@link Timeouts}: pass it to {@link Timeouts.clear} once it is not needed. */
export interface Timeout {
  /** Clock time at which it runs out. */
  readonly at: number;
}

/** A pending time-out, as the queue of its length keeps it. */
interface Entry extends Timeout {
  readonly onTimeout: () => void;
  done: boolean;
}

/** The pending time-outs of one length, oldest first (they run out in the order they were set). */
interface Queue {
  items: Entry[];
  head: number;
}

/**
 * Time-outs of a few fixed lengths on a {@link Clock}, served by one timer of that clock instead of
 * a timer per time-out.
 *
 * @remarks
 * The handler pipeline bounds every handler call that returns a promise, and making and clearing a
 * timer per call costs microseconds where the call itself may cost less. As in `Deadlines`,
 * time-outs of one length run out in the order they were set, so each length keeps a queue and the
 * single timer waits for the earliest head among the queues (a handler's `timeoutMs` is one of a
 * handful of lengths). The timer is not cancelled when nothing is pending (calls that follow one
 * another would each arm and cancel one): it runs out once and arms no other, so an idle instance
 * holds at most one timer, for at most the longest length (the system clock's timers keep no
 * process alive). On the clock, not wall time, so tests drive time-outs with a `ManualClock`.
 */
export class Timeouts {
  readonly #clock: Clock;
  readonly #queues = new Map<number, Queue>();
  #pending = 0;
  #cancelTimer: (() => void) | undefined;
  /** When the armed timer fires (clock time); Infinity when none is armed. */
  #armedAt = Infinity;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** How many time-outs are pending (for tests). */
  get pending(): number {
    return this.#pending;
  }

  /**
   * Calls `onTimeout` once `ms` of clock time have passed, unless {@link Timeouts.clear} is called
   * first. `onTimeout` must not throw (what it throws is lost).
   */
  set(ms: number, onTimeout: () => void): Timeout {
    const at = this.#clock.now() + ms;
    const entry: Entry = { at, onTimeout, done: false };
    let queue = this.#queues.get(ms);
    if (queue === undefined) {
      queue = { items: [], head: 0 };
      this.#queues.set(ms, queue);
    }
    queue.items.push(entry);
    this.#pending++;
    if (at < this.#armedAt) this.#arm(at);
    return entry;
  }

  /** Drops a pending time-out; does nothing for one that ran out or was cleared already. */
  clear(timeout: Timeout): void {
    const entry = timeout as Entry;
    if (entry.done) return;
    entry.done = true;
    if (--this.#pending === 0) {
      // The timer stays armed: cancelling it here and arming one again for the next call would
      // cost a timer per call on an endpoint that runs one call at a time (the case of
      // `Deadlines`, measured at microseconds per call). When it fires with nothing pending, it
      // arms no other.
      for (const queue of this.#queues.values()) {
        queue.items = [];
        queue.head = 0;
      }
    }
  }

  #arm(at: number): void {
    this.#cancelTimer?.();
    this.#armedAt = at;
    this.#cancelTimer = this.#clock.setTimer(Math.max(0, at - this.#clock.now()), this.#fire);
  }

  readonly #fire = (): void => {
    this.#cancelTimer = undefined;
    this.#armedAt = Infinity;
    const now = this.#clock.now();
    let next = Infinity;
    for (const queue of this.#queues.values()) {
      for (;;) {
        const oldest = dropDone(queue);
        if (oldest === undefined) break;
        if (oldest.at > now) {
          next = Math.min(next, oldest.at);
          break;
        }
        oldest.done = true;
        this.#pending--;
        queue.head++;
        oldest.onTimeout();
      }
    }
    // A call made from onTimeout may have armed the timer already.
    if (next < this.#armedAt && this.#pending > 0) this.#arm(next);
  };
}

/** Moves a queue's head past entries that are done, compacting it now and then; returns the head. */
function dropDone(queue: Queue): Entry | undefined {
  const { items } = queue;
  while (queue.head < items.length && (items[queue.head] as Entry).done) queue.head++;
  if (queue.head > 1024 && queue.head * 2 > items.length) {
    queue.items = items.slice(queue.head);
    queue.head = 0;
  }
  return queue.items[queue.head];
}
