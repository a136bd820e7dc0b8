import type { Clock } from './clock.js';

interface Timer {
  readonly at: number;
  readonly seq: number;
  readonly callback: () => void;
  cancelled: boolean;
}

/**
 * A clock that only moves when told to, for tests of backoff, delays and retention.
 *
 * @example
 * ```ts
 * const clock = new ManualClock(Date.UTC(2026, 0, 1));
 * clock.advance(200); // fires every timer due within the next 200 ms, in order
 * ```
 */
export class ManualClock implements Clock {
  #now: number;
  #seq = 0;
  #timers: Timer[] = [];

  /** @param startMs - the initial time in ms since the epoch. @defaultValue 2026-01-01T00:00:00Z */
  constructor(startMs = Date.UTC(2026, 0, 1)) {
    this.#now = startMs;
  }

  now(): number {
    return this.#now;
  }

  setTimer(delayMs: number, callback: () => void): () => void {
    const timer: Timer = {
      at: this.#now + Math.max(0, delayMs),
      seq: this.#seq++,
      callback,
      cancelled: false,
    };
    this.#timers.push(timer);
    this.#timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
    return () => {
      timer.cancelled = true;
    };
  }

  /** The time of the earliest pending timer, or undefined when none is pending. */
  nextTimerAt(): number | undefined {
    this.#timers = this.#timers.filter((t) => !t.cancelled);
    return this.#timers[0]?.at;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way, in order. */
  advance(ms: number): void {
    this.advanceTo(this.#now + ms);
  }

  /** Moves time to `timeMs` (never backwards), firing due timers in order. */
  advanceTo(timeMs: number): void {
    for (;;) {
      const next = this.#timers.find((t) => !t.cancelled);
      if (next === undefined || next.at > timeMs) break;
      this.#timers.splice(this.#timers.indexOf(next), 1);
      this.#now = Math.max(this.#now, next.at);
      next.callback();
    }
    this.#now = Math.max(this.#now, timeMs);
  }
}
