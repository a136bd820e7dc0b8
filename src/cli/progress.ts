import type { CliOutput } from './cli-io.js';

/**
 * Paces work to `rate` items per second with a token bucket that holds at most one second's worth
 * (and at least one token, so a rate below 1 still gives one every 1 / rate seconds), so a pause
 * never turns into a burst larger than `rate`.
 */
export class TokenBucket {
  readonly #rate: number;
  readonly #capacity: number;
  #tokens: number;
  #last: number;
  #queue: Promise<void> = Promise.resolve();

  constructor(rate: number) {
    this.#rate = rate;
    this.#capacity = Math.max(rate, 1);
    this.#tokens = Math.min(rate, 1);
    this.#last = Date.now();
  }

  /** Resolves once one token is taken; callers are served in call order. */
  take(): Promise<void> {
    const turn = this.#queue.then(() => this.#takeOne());
    this.#queue = turn;
    return turn;
  }

  async #takeOne(): Promise<void> {
    for (;;) {
      const now = Date.now();
      this.#tokens = Math.min(this.#capacity, this.#tokens + ((now - this.#last) / 1000) * this.#rate);
      this.#last = now;
      if (this.#tokens >= 1) {
        this.#tokens -= 1;
        return;
      }
      const waitMs = Math.ceil(((1 - this.#tokens) / this.#rate) * 1000);
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  }
}

const formatSeconds = (s: number): string =>
  !Number.isFinite(s) ? '?' : s < 60 ? `${Math.ceil(s)}s` : `${Math.floor(s / 60)}m${Math.ceil(s % 60)}s`;

/** A one-line progress bar redrawn with a carriage return; draws nothing unless `out` is a terminal. */
export class ProgressBar {
  readonly #out: CliOutput;
  readonly #total: number;
  readonly #label: string;
  readonly #started = Date.now();
  #done = 0;
  #lastDraw = 0;

  constructor(out: CliOutput, total: number, label: string) {
    this.#out = out;
    this.#total = total;
    this.#label = label;
  }

  /** Counts `n` more items done. */
  tick(n = 1): void {
    this.#done += n;
    const now = Date.now();
    if (now - this.#lastDraw >= 100 || this.#done === this.#total) {
      this.#lastDraw = now;
      this.#draw(now);
    }
  }

  /** Clears the line, so what follows starts on a clean one. */
  finish(): void {
    if (this.#out.isTTY === true) this.#out.write('\r\x1b[2K');
  }

  #draw(now: number): void {
    if (this.#out.isTTY !== true) return;
    const elapsed = Math.max(now - this.#started, 1) / 1000;
    const rate = this.#done / elapsed;
    const eta = rate > 0 ? (this.#total - this.#done) / rate : Number.POSITIVE_INFINITY;
    const share = this.#total === 0 ? 1 : this.#done / this.#total;
    const width = 24;
    const filled = Math.round(share * width);
    const bar = `${'#'.repeat(filled)}${'-'.repeat(width - filled)}`;
    this.#out.write(
      `\r\x1b[2K${this.#label} [${bar}] ${this.#done}/${this.#total} ${Math.round(share * 100)}%  ${rate.toFixed(0)}/s  eta ${formatSeconds(eta)}`,
    );
  }
}
