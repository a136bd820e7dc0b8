import type pg from 'pg';
import type { Clock } from '../../clock/clock.js';
import { sleep } from '../../clock/sleep.js';
import type { Logger } from '../../logging/logger.js';
import { holdClient, type HeldClient } from '../held-client.js';

const RETRY_BASE_MS = 100;
const RETRY_CAP_MS = 5_000;
/** A session that listened at least this long was healthy: the next loss starts the backoff afresh. */
const STABLE_SESSION_MS = 10_000;
/** After this many sessions in a row lost soon after they opened (or failed to), one more warning. */
const WARN_AGAIN_AFTER = 10;

/**
 * One broker's LISTEN session: a pool client held for the broker's life, LISTENing on its channel,
 * opened again (with backoff) whenever its connection is lost.
 *
 * @remarks
 * Each session resolves its own "lost" promise: a late `'end'` of a session already given up can
 * never end the next one. A lost session is followed by a pause of at least 100 ms before the next
 * connection, growing (up to 5 s) while sessions keep dying soon after they open.
 *
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
    /** Sessions in a row that failed to open, or were lost before they had listened for long. */
    let failures = 0;
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      let held: HeldClient | undefined;
      let listenedAt: number | undefined;
      let error: unknown;
      try {
        // Per session: the 'end' of a client given up on must not resolve a later session's promise.
        let resolveLost!: () => void;
        const lost = new Promise<void>((resolve) => (resolveLost = resolve));
        this.#lost = resolveLost;
        held = await holdClient(this.#pool, (cause) => {
          error = cause;
          resolveLost();
        });
        held.client.once('end', () => {
          resolveLost();
        });
        held.client.on('notification', (message: pg.Notification) => {
          if (message.channel === this.#channel) this.#onNotify(message.payload || undefined);
        });
        await held.client.query(`LISTEN "${this.#channel}"`);
        listenedAt = this.#clock.now();
        if (failures > 0) this.#logger.info('The PostgreSQL broker listens for new messages again');
        started();
        this.#onNotify(undefined);
        await lost;
      } catch (caught) {
        error = caught;
        started();
      } finally {
        held?.release(true);
      }
      // Read through the controller: the loop's condition narrowed `signal.aborted` to false.
      if (this.#stop.signal.aborted) break;
      if (listenedAt !== undefined && this.#clock.now() - listenedAt >= STABLE_SESSION_MS) failures = 0;
      failures++;
      // Repeats while PostgreSQL is away: the receivers report the outage; one warning here, and
      // one more if sessions keep dying as soon as they open.
      if (failures === 1 || failures === WARN_AGAIN_AFTER) {
        this.#logger.warn(
          failures === 1
            ? 'The PostgreSQL broker lost its LISTEN connection; reconnecting (receivers poll meanwhile)'
            : `The PostgreSQL broker lost its LISTEN connection ${failures} times in a row soon after opening it; reconnecting with backoff (receivers poll meanwhile)`,
          { error: error instanceof Error ? error.message : 'the connection ended' },
        );
      }
      await sleep(
        this.#clock,
        Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(failures - 1, 16)),
        signal,
      );
    }
  }
}
