// Helpers shared by the bench scripts: medians, number formatting, aligned tables, a completion counter.

/** The median of some samples (the upper one of an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

/** A rate as a whole number with thousands separators. */
export const fmtRate = (n: number): string => Math.round(n).toLocaleString('en-US');

/** A plain-text table: first column left-aligned, the rest right-aligned. */
export function table(header: readonly string[], body: readonly (readonly string[])[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...body.map((r) => (r[c] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, c) => (c === 0 ? cell.padEnd(widths[c] ?? 0) : cell.padStart(widths[c] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

/** Counts completions and resolves a waiter once the count reaches its target. */
export class Counter {
  count = 0;
  #target = Infinity;
  #resolve: (() => void) | undefined;

  /** @param timeoutMs - how long `until` waits before it rejects, so a run that loses messages fails. */
  constructor(private readonly timeoutMs: number) {}

  hit(): void {
    this.count++;
    if (this.count >= this.#target) {
      const resolve = this.#resolve;
      this.#target = Infinity;
      this.#resolve = undefined;
      resolve?.();
    }
  }

  /** Resolves once `count >= target`. */
  until(target: number): Promise<void> {
    if (this.count >= target) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`Only ${this.count} of ${target} messages done after ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.#target = target;
      this.#resolve = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}
