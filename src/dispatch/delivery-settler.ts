import { toErrorInfo, type Delivery, type ErrorInfo, type MessageBroker } from '../broker/message-broker.js';
import { SETTLED } from '../broker/settled.js';
import type { Clock } from '../clock/clock.js';
import { Deadlines } from '../clock/deadline.js';
import { sleep } from '../clock/sleep.js';
import { MAX_TIMER_MS } from '../clock/timeouts.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { Logger } from '../logging/logger.js';
import { flightSignal, type InFlight } from './in-flight.js';
import { DEFAULT_RETRY, backoffDelay, type RetryPolicy } from './retry-policy.js';

/**
 * Settles deliveries on the broker (ack, nack with a retry time or a dead letter, give back): each
 * step bounded by `settleTimeoutMs` and retried with backoff, a stale delivery given up at once.
 *
 * @remarks
 * A step never throws: it ends `done`, `stale` (the broker redelivered the message elsewhere) or
 * `failed` (every try failed; the broker redelivers once the delivery's lease runs out). What sets a
 * step apart is its {@link SettleStep}, never its name.
 */
export class DeliverySettler {
  readonly #broker: MessageBroker;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #random: (() => number) | undefined;
  readonly #changed: () => void;
  readonly #timeoutMs: number;
  /** Bounds every settle step by `settleTimeoutMs`, with one timer for all of them. */
  readonly #deadlines: Deadlines;
  #waits = 0;
  /** The ack step of every handled delivery, made once. */
  readonly #ack = (delivery: Delivery): Promise<void> => this.#broker.ack(delivery.id);

  /**
   * @param changed - told whenever a step starts or stops waiting on the clock.
   * @throws HarrierError `invalid-option` for a `settleTimeoutMs` that is not a number of ms above 0
   *   and at most 2147483647.
   */
  constructor(
    broker: MessageBroker,
    clock: Clock,
    logger: Logger,
    settleTimeoutMs: number,
    random: (() => number) | undefined,
    changed: () => void,
  ) {
    // Node fires a timer of more than 2^31 - 1 ms after 1 ms, which would time out every step at once.
    if (!Number.isFinite(settleTimeoutMs) || settleTimeoutMs <= 0 || settleTimeoutMs > MAX_TIMER_MS) {
      throw new HarrierError(
        'invalid-option',
        `settleTimeoutMs is ${settleTimeoutMs}: use a number of milliseconds above 0 and at most ${MAX_TIMER_MS}`,
      );
    }
    this.#broker = broker;
    this.#clock = clock;
    this.#logger = logger;
    this.#random = random;
    this.#changed = changed;
    this.#timeoutMs = settleTimeoutMs;
    this.#deadlines = new Deadlines(settleTimeoutMs);
  }

  /** Steps waiting on the clock for their next try (see `Dispatcher.settleWaitCount`). */
  get waitCount(): number {
    return this.#waits;
  }

  /**
   * Acks a handled delivery. Answers {@link SETTLE_DONE} itself when the broker's ack answered
   * `SETTLED` (done already): the caller may then end the delivery in this turn.
   */
  ack(flight: InFlight): Promise<SettleResult> {
    return this.run(flight, BROKER_STEPS.ack, this.#ack);
  }

  /** Sends a delivery back to be tried again at `retryAt`, its attempt counted. */
  retryAt(flight: InFlight, retryAt: number, error: ErrorInfo): Promise<SettleResult> {
    return this.run(flight, BROKER_STEPS.nack, () =>
      this.#broker.nack(flight.delivery.id, { retryAt, error }),
    );
  }

  /**
   * Gives a delivery back unhandled and uncounted, not to be delivered again before `retryAt`: a
   * message newer than this code waits for a worker that knows its version.
   */
  releaseUntil(flight: InFlight, retryAt: number): Promise<SettleResult> {
    return this.run(flight, BROKER_STEPS.release, () =>
      this.#broker.nack(flight.delivery.id, { release: true, retryAt }),
    );
  }

  /** Ends a delivery whose dead letter is stored: the broker never delivers it again. */
  deadLettered(flight: InFlight, reason: string, error: ErrorInfo): Promise<SettleResult> {
    return this.run(flight, BROKER_STEPS.nack, () =>
      this.#broker.nack(flight.delivery.id, { deadLetter: reason, error }),
    );
  }

  /**
   * Sends a delivery back with its dead-lettering decided and not recorded (`flight.decided`), to be
   * delivered again at `retryAt` and recorded then, without running the handler again.
   */
  retryWithDecision(flight: InFlight, retryAt: number): Promise<SettleResult> {
    return this.run(flight, BROKER_STEPS.nack, () =>
      this.#broker.nack(flight.delivery.id, { retryAt, pendingDeadLetter: flight.decided }),
    );
  }

  /**
   * Sends a delivery back to its queue unhandled, its attempt uncounted (a stop, or an outage paused
   * the endpoint).
   */
  giveBack(flight: InFlight): Promise<SettleResult> {
    const { decided } = flight;
    // A decided dead letter goes back with its decision, so the next delivery records it
    // instead of running the handler again.
    return this.run(flight, BROKER_STEPS.release, () =>
      this.#broker.nack(
        flight.delivery.id,
        decided === undefined
          ? { release: true }
          : { retryAt: this.#clock.now(), pendingDeadLetter: decided },
      ),
    );
  }

  /**
   * Sends back, with backoff and as a failed attempt, a delivery the dispatcher failed on itself (a
   * bug, or a logger that throws), unless its settling began already or a stop released it. Never
   * throws.
   */
  async afterFailure(flight: InFlight, error: unknown): Promise<void> {
    if (flight.settling || flight.released) return;
    const retryAt =
      this.#clock.now() + backoffDelay(SEND_BACK_RETRY, flight.delivery.facts.attempt, this.#random);
    await this.run(flight, BROKER_STEPS.nack, () =>
      this.#broker.nack(
        flight.delivery.id,
        // A dead letter decided already goes back with its decision, as on stop(): the next delivery
        // records it instead of running the handler again.
        flight.decided === undefined
          ? { retryAt, error: toErrorInfo(error) }
          : { retryAt, pendingDeadLetter: flight.decided },
      ),
    ).catch(() => undefined);
  }

  /**
   * Runs a settle step, each try bounded by `settleTimeoutMs`, retrying with backoff up to the step's
   * tries; never throws. Stops early once the delivery is released by `stop()` (unless the step is
   * the release itself).
   */
  run(
    flight: InFlight,
    step: SettleStep,
    action: (delivery: Delivery) => Promise<unknown>,
  ): Promise<SettleResult> {
    if (step.settlesOnBroker) flight.settling = true;
    let first: Promise<unknown>;
    try {
      first = action(flight.delivery);
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      first = Promise.reject(error);
    }
    // The broker's mark of a step done already (see SETTLED): nothing to wait for or bound, and no
    // async function run for it.
    if (first === SETTLED) return SETTLE_DONE;
    return this.#tries(flight, step, action, first);
  }

  /** `promise`, rejected with HarrierError `settle-timeout` once it took longer than `settleTimeoutMs`. */
  bounded<T>(promise: Promise<T>, step: SettleStep): Promise<T> {
    return this.#deadlines.bound(
      promise,
      () => new HarrierError('settle-timeout', `${step.name} took longer than ${this.#timeoutMs} ms`),
    );
  }

  /**
   * Waits `ms` of clock time before a step's next try, counted as a settle wait so a test clock moves
   * on for it; a stop cuts the wait short unless the step is the release itself.
   */
  async pause(flight: InFlight, step: SettleStep, ms: number): Promise<void> {
    this.#waits += 1;
    this.#changed();
    try {
      await sleep(this.#clock, ms, step.endsOnRelease ? flightSignal(flight) : undefined);
    } finally {
      this.#waits -= 1;
    }
  }

  async #tries(
    flight: InFlight,
    step: SettleStep,
    action: (delivery: Delivery) => Promise<unknown>,
    first: Promise<unknown>,
  ): Promise<SettleResult> {
    const { delivery } = flight;
    let pause = 50;
    for (let attempt = 1; ; attempt++) {
      try {
        const pending = attempt === 1 ? first : action(delivery);
        // A step that has settled already (a broker answering from memory) needs no deadline: its
        // reaction runs before the continuation after one tick. Checking costs less than even the
        // shared deadline queue, measured on the in-memory send path.
        let settled = false;
        const mark = (): void => {
          settled = true;
        };
        void pending.then(mark, mark);
        await Promise.resolve();
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by `mark` meanwhile
        await (settled ? pending : this.bounded(pending, step));
        return 'done';
      } catch (error) {
        if (HarrierError.is(error) && error.code === 'stale-delivery') {
          this.#logger.warn(`${step.name} refused: the delivery is stale (redelivered elsewhere)`, {
            deliveryId: delivery.id,
          });
          return 'stale';
        }
        if (attempt >= step.tries) {
          this.#logger.error(`${step.name} failed ${attempt} times; giving up on it`, {
            deliveryId: delivery.id,
            error: toErrorInfo(error),
          });
          return 'failed';
        }
        this.#logger.error(`${step.name} failed; retrying`, {
          deliveryId: delivery.id,
          attempt,
          error: toErrorInfo(error),
        });
        await this.pause(flight, step, pause);
        pause = Math.min(pause * 2, 5_000);
        if (flight.released && step.endsOnRelease) return 'failed';
      }
    }
  }
}

/** How a settle step ended: done, refused as stale, or failed every try. */
export type SettleResult = 'done' | 'stale' | 'failed';

/** What sets one kind of settle step apart from the others. */
export interface SettleStep {
  /** What the step does, in log lines and time-out errors. */
  readonly name: string;
  /** Tries before the step gives up (`failed`). */
  readonly tries: number;
  /**
   * The step settles the delivery on the broker: once one began, a failure of the dispatcher leaves
   * the delivery to it instead of sending it back again (see {@link DeliverySettler.afterFailure}).
   */
  readonly settlesOnBroker: boolean;
  /**
   * A stop cuts the step's pauses short and ends it once the delivery is released; false for the
   * release, which is the stop's own step.
   */
  readonly endsOnRelease: boolean;
}

/** Tries of an ack or a nack before the dispatcher gives up on it (the broker redelivers). */
const SETTLE_ATTEMPTS = 8;

/** Tries of releasing a delivery still running when the grace period of `stop()` ran out. */
const RELEASE_TRIES = 2;

/** The steps that settle a delivery on the broker. */
const BROKER_STEPS = {
  ack: { name: 'ack', tries: SETTLE_ATTEMPTS, settlesOnBroker: true, endsOnRelease: true },
  nack: { name: 'nack', tries: SETTLE_ATTEMPTS, settlesOnBroker: true, endsOnRelease: true },
  release: { name: 'release', tries: RELEASE_TRIES, settlesOnBroker: true, endsOnRelease: false },
} as const satisfies Record<string, SettleStep>;

/** What a step answers when the broker settled it already: one promise for all of them. */
export const SETTLE_DONE: Promise<SettleResult> = Promise.resolve('done');

/**
 * Backoff of a delivery sent back without a verdict on the message (its dead letter could not be
 * stored, or the dispatcher failed): 1 s doubling to 60 s, jitter 0.2.
 */
export const SEND_BACK_RETRY: RetryPolicy = { ...DEFAULT_RETRY, immediate: 0, baseMs: 1_000 };
