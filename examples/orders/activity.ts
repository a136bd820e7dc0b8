/**
 * Turns the bus's lifecycle hooks into a printed timeline, and lets the example wait until the work
 * it expects is done (no fixed sleeps).
 */
import type { DispatchHooks, Envelope } from '../../src/index.js';

/** How many deliveries were handled, retried and dead-lettered so far. */
export interface ActivityCounts {
  readonly handled: number;
  readonly retrying: number;
  readonly deadLettered: number;
}

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** The bus's activity, printed as it happens and counted. */
export class BusActivity {
  readonly #startedAt = Date.now();
  readonly #print: (line: string) => void;
  readonly #counts = { handled: 0, retrying: 0, deadLettered: 0 };
  readonly #listeners = new Set<() => void>();

  /** Pass these to the bus. */
  readonly hooks: DispatchHooks = {
    onHandled: ({ envelope, handler, attempt }) => {
      this.#counts.handled++;
      this.#about('handled', handler, envelope, attempt > 1 ? `on attempt ${attempt}` : '');
    },
    onRetrying: ({ envelope, handler, attempt, error, retryAt }) => {
      this.#counts.retrying++;
      const delay = Math.max(0, retryAt - Date.now());
      this.#about(
        'retrying',
        handler,
        envelope,
        `attempt ${attempt} failed (${messageOf(error)}); next in ~${delay} ms`,
      );
    },
    onDeadLettered: ({ record }) => {
      this.#counts.deadLettered++;
      const what = `${record.reason} after ${record.attemptCount} attempts: ${record.error.message}`;
      this.note(
        'dead-lettered',
        record.handler ?? '(none)',
        record.type ?? '(unknown)',
        record.partitionKey ?? '',
        what,
      );
    },
  };

  constructor(print: (line: string) => void = (line) => void process.stdout.write(`${line}\n`)) {
    this.#print = print;
  }

  get counts(): ActivityCounts {
    return { ...this.#counts };
  }

  /** Prints one timeline line: what happened, who did it, to which message type and key. */
  note(what: string, who: string, type: string, key: string, detail = ''): void {
    const at = `+${Date.now() - this.#startedAt} ms`.padStart(9);
    this.#print(
      `${at}  ${what.padEnd(13)}  ${who.padEnd(25)}  ${type.padEnd(21)}  ${key.padEnd(6)}  ${detail}`.trimEnd(),
    );
    for (const listener of [...this.#listeners]) listener();
  }

  /**
   * Resolves once every count in `expected` is reached; rejects after `timeoutMs` with what was seen.
   */
  waitFor(expected: Partial<ActivityCounts>, timeoutMs: number): Promise<void> {
    const reached = (): boolean =>
      (Object.keys(expected) as (keyof ActivityCounts)[]).every(
        (key) => this.#counts[key] >= (expected[key] ?? 0),
      );
    return new Promise<void>((resolve, reject) => {
      const check = (): void => {
        if (!reached()) return;
        finish();
        resolve();
      };
      // A real (ref'd) timer: besides the timeout, it keeps the process alive while the broker's
      // own retry timers, which never hold a process open, are the only thing left to wait for.
      const timer = setTimeout(() => {
        finish();
        reject(
          new Error(
            `Timed out after ${timeoutMs} ms waiting for ${JSON.stringify(expected)}; saw ${JSON.stringify(this.#counts)}`,
          ),
        );
      }, timeoutMs);
      const finish = (): void => {
        clearTimeout(timer);
        this.#listeners.delete(check);
      };
      this.#listeners.add(check);
      check();
    });
  }

  #about(what: string, handler: string, envelope: Envelope, detail: string): void {
    this.note(what, handler, envelope.type, envelope.meta.partitionKey ?? '', detail);
  }
}
