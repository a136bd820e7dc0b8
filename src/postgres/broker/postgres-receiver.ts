import { AsyncInbox } from '../../broker/async-inbox.js';
import type { Delivery, ReceiverOptions } from '../../broker/message-broker.js';
import type { Clock } from '../../clock/clock.js';
import type { Logger } from '../../logging/logger.js';
import type { ReceiverLanes } from './receiver-lanes.js';

const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };
const RETRY_BASE_MS = 100;
const RETRY_CAP_MS = 5_000;
/** At most one warning per this long while the takes fail (an outage). */
const WARN_EVERY_MS = 10_000;

/** What a receiver needs from the broker that made it. */
export interface PostgresReceiverContext {
  readonly clock: Clock;
  readonly logger: Logger;
  readonly pollIntervalMs: number;
  /** Resolves once the broker is ready (schema checked); rejects while it cannot be. */
  ready(): Promise<void>;
  /** Takes up to `limit` due rows of `lanes` and records them as this receiver's deliveries. */
  take(receiver: PostgresReceiver, limit: number): Promise<Delivery[]>;
  /** When the next row of `lanes` not due yet becomes due. */
  nextDue(lanes: ReceiverLanes): Promise<number | undefined>;
  /** Gives deliveries back unhandled (never taken from the inbox); errors are the broker's to log. */
  release(deliveryIds: readonly string[]): Promise<void>;
  /** The error to report for a failed take (`postgres-unavailable` for an outage). */
  describeError(error: unknown): unknown;
}

/**
 * One receiver of a {@link PostgresBroker}: takes due rows of its endpoint's lanes into an inbox as
 * deliveries, at most `prefetch` unsettled at once, and waits between takes for a wake-up.
 *
 * @remarks
 * It takes again when a NOTIFY names one of its lanes (or after the LISTEN session reconnected),
 * when one of its deliveries settles, at the due time of the earliest row not due yet, and every
 * `pollIntervalMs` in case a notification was missed. A take that fails (PostgreSQL unreachable)
 * is retried with backoff and reported as a warning: the iteration never fails for an outage.
 */
export class PostgresReceiver implements AsyncIterator<Delivery> {
  readonly lanes: ReceiverLanes;
  readonly endpoint: string;
  readonly #context: PostgresReceiverContext;
  readonly #options: ReceiverOptions;
  readonly #prefetch: number;
  readonly #inbox = new AsyncInbox<Delivery>();
  readonly #laneSet: ReadonlySet<string>;
  readonly #onEnd: () => void;
  /** Deliveries this receiver took and that are not settled (nor lost) yet. */
  #held = 0;
  #dirty = true;
  #waker: (() => void) | undefined;
  #cancelPoll: (() => void) | undefined;
  #cancelDue: (() => void) | undefined;
  #started = false;
  #ended = false;
  #closing: Promise<void> | undefined;
  #loop: Promise<void> = Promise.resolve();
  #waiting: Promise<IteratorResult<Delivery>> | undefined;

  constructor(
    context: PostgresReceiverContext,
    options: ReceiverOptions,
    lanes: ReceiverLanes,
    onEnd: () => void,
  ) {
    this.#context = context;
    this.#options = options;
    this.endpoint = options.endpoint;
    this.lanes = lanes;
    this.#prefetch = Math.max(1, options.prefetch ?? 16);
    this.#laneSet = new Set([...lanes.lanes, lanes.orderedLane]);
    this.#onEnd = onEnd;
  }

  /** True while the receiver runs. */
  get open(): boolean {
    return this.#closing === undefined;
  }

  next(): Promise<IteratorResult<Delivery>> {
    if (this.#ended) return Promise.resolve(DONE);
    const waiting = this.#waiting;
    if (waiting !== undefined) return waiting.then(() => this.next());
    if (!this.#started) {
      if (this.#closing !== undefined) return this.#end();
      this.#started = true;
      this.#loop = this.#run();
    }
    const item = this.#inbox.take();
    if (item !== undefined) return Promise.resolve({ done: false, value: item });
    const next = this.#inbox
      .next(this.#options.signal)
      .then(async (taken): Promise<IteratorResult<Delivery>> => {
        this.#waiting = undefined;
        if (taken === undefined) return this.#end();
        if (this.#inbox.closed) {
          // Handed over as the receiver closed: nobody takes it now, so it goes back.
          await this.#context.release([taken.id]);
          return this.#end();
        }
        return { done: false, value: taken };
      });
    this.#waiting = next;
    return next;
  }

  return(): Promise<IteratorResult<Delivery>> {
    return this.#end();
  }

  /** A NOTIFY of `lane` (undefined: any lane) arrived. */
  notify(lane: string | undefined): void {
    if (lane === undefined || this.#laneSet.has(lane)) this.#wake();
  }

  /** One of this receiver's deliveries was settled, or lost to an expired lease: its slot is free. */
  settled(): void {
    this.#held = Math.max(0, this.#held - 1);
    this.#wake();
  }

  /** Stops taking, gives back the deliveries never taken from the inbox, and ends the iteration. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#inbox.close();
      this.#cancelPoll?.();
      this.#cancelDue?.();
      this.#waker?.();
      await this.#loop;
      const untaken = this.#inbox.drain();
      if (untaken.length > 0) await this.#context.release(untaken.map((d) => d.id));
    })();
    return this.#closing;
  }

  async #end(): Promise<IteratorReturnResult<undefined>> {
    if (!this.#ended) {
      this.#ended = true;
      this.#onEnd();
    }
    await this.close();
    return DONE;
  }

  /** Read through a call: close() flips it while the loop awaits. */
  #isClosed(): boolean {
    return this.#inbox.closed;
  }

  #wake(): void {
    this.#dirty = true;
    const waker = this.#waker;
    this.#waker = undefined;
    waker?.();
  }

  #armPoll(): void {
    this.#cancelPoll = this.#context.clock.setTimer(this.#context.pollIntervalMs, () => {
      this.#armPoll();
      this.#wake();
    });
  }

  #armDue(due: number | undefined): void {
    this.#cancelDue?.();
    this.#cancelDue = undefined;
    if (due === undefined) return;
    this.#cancelDue = this.#context.clock.setTimer(due - this.#context.clock.now(), () => {
      this.#wake();
    });
  }

  async #run(): Promise<void> {
    const { clock, logger } = this.#context;
    this.#armPoll();
    let failures = 0;
    let lastWarned = -Infinity;
    while (!this.#inbox.closed) {
      const free = this.#prefetch - this.#held;
      if (free <= 0 || !this.#dirty) {
        await new Promise<void>((resolve) => (this.#waker = resolve));
        continue;
      }
      this.#dirty = false;
      try {
        await this.#context.ready();
        const deliveries = await this.#context.take(this, free);
        failures = 0;
        this.#held += deliveries.length;
        for (const delivery of deliveries) this.#inbox.push(delivery);
        if (deliveries.length === free) this.#dirty = true;
        else if (!this.#isClosed()) this.#armDue(await this.#context.nextDue(this.lanes));
      } catch (error) {
        failures++;
        this.#dirty = true;
        const now = clock.now();
        if (now - lastWarned >= WARN_EVERY_MS) {
          lastWarned = now;
          const reported = this.#context.describeError(error);
          logger.warn('The PostgreSQL broker could not take messages; retrying', {
            endpoint: this.endpoint,
            error: reported instanceof Error ? reported.message : String(reported),
            failures,
          });
        }
        const pause = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(failures - 1, 16));
        await new Promise<void>((resolve) => {
          const cancel = clock.setTimer(pause, () => {
            this.#waker = undefined;
            resolve();
          });
          this.#waker = () => {
            cancel();
            resolve();
          };
        });
      }
    }
  }
}
