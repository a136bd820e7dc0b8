import type { CliOutput } from './cli-io.js';

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
