import type { Clock } from '../clock/clock.js';
import { sleep } from '../clock/sleep.js';

/**
 * Paces work to `rate` items per second with a token bucket that holds at most one second's worth
 * (and at least one token, so a rate below 1 still gives one every 1 / rate seconds), so a pause
 * never turns into a burst larger than `rate`.
 *
 * @remarks
 * Time comes from the injected clock, so a test drives the pace with a `ManualClock`.
 */
export class TokenBucket {
  readonly #rate: number;
  readonly #capacity: number;
  readonly #clock: Clock;
  #tokens: number;
  #last: number;
  #queue: Promise<void> = Promise.resolve();

  /**
   * @param rate - tokens per second, above 0.
   * @param clock - the time source.
   */
  constructor(rate: number, clock: Clock) {
    this.#rate = rate;
    this.#clock = clock;
    this.#capacity = Math.max(rate, 1);
    this.#tokens = Math.min(rate, 1);
    this.#last = clock.now();
  }

  /** Resolves once one token is taken; callers are served in call order. */
  take(): Promise<void> {
    const turn = this.#queue.then(() => this.#takeOne());
    this.#queue = turn;
    return turn;
  }

  async #takeOne(): Promise<void> {
    for (;;) {
      const now = this.#clock.now();
      this.#tokens = Math.min(this.#capacity, this.#tokens + ((now - this.#last) / 1000) * this.#rate);
      this.#last = now;
      if (this.#tokens >= 1) {
        this.#tokens -= 1;
        return;
      }
      await sleep(this.#clock, Math.ceil(((1 - this.#tokens) / this.#rate) * 1000));
    }
  }
}
