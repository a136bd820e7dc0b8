import type pg from 'pg';
import type { Clock } from '../../clock/clock.js';
import { sleep } from '../../clock/sleep.js';
import type { Logger } from '../../logging/logger.js';
import { holdClient, type HeldClient } from '../held-client.js';

const RETRY_BASE_MS = 100;
const RETRY_CAP_MS = 5_000;

/**
 * One broker's LISTEN session: a pool client held for the broker's life, LISTENing on its channel,
 * opened again (with backoff) whenever its connection is lost.
 *
 * @remarks
 * `onNotify` gets each notification's payload (a lane), and `undefined` after every (re)connect: a
 * notification sent while the session was down is lost, so every receiver looks once.
 */
export class BrokerListener {
  readonly #pool: pg.Pool;
  readonly #channel: string;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #onNotify: (lane: string | undefined) => void;
  readonly #stop = new AbortController();
  #lost: (() => void) | undefined;
  #loop: Promise<void> | undefined;

  constructor(
    pool: pg.Pool,
    channel: string,
    clock: Clock,
    logger: Logger,
    onNotify: (lane: string | undefined) => void,
  ) {
    this.#pool = pool;
    this.#channel = channel;
    this.#clock = clock;
    this.#logger = logger;
    this.#onNotify = onNotify;
  }

  /** Starts listening in the background: resolves once the first session listens or failed to. */
  start(): Promise<void> {
    // Closed before it started (the broker closed while checking its schema): open nothing.
    if (this.#stop.signal.aborted) return Promise.resolve();
    let first!: () => void;
    const started = new Promise<void>((resolve) => (first = resolve));
    this.#loop ??= this.#run(first);
    return started;
  }

  /** Ends the session and stops reconnecting. */
  async close(): Promise<void> {
    this.#stop.abort();
    this.#lost?.();
    await this.#loop;
  }

  async #run(started: () => void): Promise<void> {
    let failures = 0;
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      let held: HeldClient | undefined;
      try {
        const lost = new Promise<void>((resolve) => (this.#lost = resolve));
        held = await holdClient(this.#pool, () => this.#lost?.());
        held.client.once('end', () => this.#lost?.());
        held.client.on('notification', (message: pg.Notification) => {
          if (message.channel === this.#channel) this.#onNotify(message.payload || undefined);
        });
        await held.client.query(`LISTEN "${this.#channel}"`);
        if (failures > 0) this.#logger.info('The PostgreSQL broker listens for new messages again');
        failures = 0;
        started();
        this.#onNotify(undefined);
        await lost;
      } catch (error) {
        failures++;
        started();
        // Repeats while PostgreSQL is away: the receivers report the outage; one warning here.
        if (failures === 1)
          this.#logger.warn(
            'The PostgreSQL broker lost its LISTEN connection; reconnecting (receivers poll meanwhile)',
            {
              error: error instanceof Error ? error.message : String(error),
            },
          );
      } finally {
        held?.release(true);
      }
      // Read through the controller: the loop's condition narrowed `signal.aborted` to false.
      if (failures > 0 && !this.#stop.signal.aborted) {
        await sleep(
          this.#clock,
          Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(failures - 1, 16)),
          signal,
        );
      }
    }
  }
}
