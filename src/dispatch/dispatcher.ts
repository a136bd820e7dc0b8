import { toErrorInfo, type Delivery, type MessageBroker } from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { settlesWithin } from '../clock/deadline.js';
import { sleep } from '../clock/sleep.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { loggingNeverThrows } from '../logging/logging-never-throws.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { SendOptions } from '../messages/send-options.js';
import { DeadLetterRecorder } from './dead-letter-recorder.js';
import { DeliverySettler, SETTLE_DONE, type SettleResult } from './delivery-settler.js';
import { HandlerPipeline } from './handler-pipeline.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import { InFlight } from './in-flight.js';
import type { MessagePublisher } from './message-publisher.js';
import { OutageBreaker, resolveOutageOptions } from './outage-breaker.js';
import { OutageSuspects } from './outage-suspects.js';
import type { DeadLetterOutcome, PipelineOutcome, RetryOutcome } from './pipeline-outcome.js';

/** Options of {@link Dispatcher}. */
export interface DispatcherOptions extends HandlerPipelineOptions {
  readonly broker: MessageBroker;
  readonly deadLetters: DeadLetterStore;
  /**
   * Commits what a handler recorded, after it succeeded: the event log (when it has one), then the
   * broker. Give it the same broker.
   */
  readonly publisher: MessagePublisher;
  /**
   * Most handler calls running at once.
   * @defaultValue 16
   */
  readonly concurrency?: number;
  /**
   * How long one step of settling a delivery (storing its dead letter, acking, nacking) may take
   * before it counts as failed, in ms.
   *
   * @remarks
   * A dead-letter store that hangs instead of failing (a client that queues commands while its Redis
   * is away) must not hold a worker slot: after {@link DEAD_LETTER_STORE_TRIES} tries the delivery
   * goes back to its queue with backoff and the dead letter is recorded by a later delivery.
   * @defaultValue 5000
   */
  readonly settleTimeoutMs?: number;
  /**
   * Register projections as broker subscriptions; false when an event log feeds them.
   * @defaultValue true
   */
  readonly projectionsViaBroker?: boolean;
}

/** Options of {@link Dispatcher.stop}. */
export interface StopOptions {
  /**
   * How long in-flight handlers may run after `stop()` before their deliveries are released.
   * @defaultValue 10000
   */
  readonly gracePeriodMs?: number;
}

/** How long `stop()` waits for the receiver to close once every delivery is settled, in ms. */
export const RECEIVER_CLOSE_WAIT_MS = 5_000;

/**
 * Receives deliveries for one endpoint and runs them through decode, verify, route, middleware and
 * handler, then acks, retries or dead-letters each.
 *
 * @remarks
 * The loop never ends on a failure: bad input is dead-lettered, handler errors are retried or
 * dead-lettered, failed acks and nacks are logged and retried, and a receiver that throws is
 * re-opened after a pause.
 */
export class Dispatcher {
  readonly #o: DispatcherOptions;
  readonly #pipeline: HandlerPipeline;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #concurrency: number;
  /** Acks, nacks and gives back deliveries, each step bounded and retried. */
  readonly #settler: DeliverySettler;
  readonly #deadLetters: DeadLetterRecorder;
  readonly #inFlight = new Set<InFlight>();
  readonly #listeners = new Set<() => void>();
  readonly #slotWaiters: (() => void)[] = [];
  /** Pauses the receive loop while a dependency is unreachable (see {@link OutageBreaker}). */
  readonly #breaker: OutageBreaker;
  /** Whether an attempt that met an outage is the outage's or the message's own failure. */
  readonly #suspects: OutageSuspects;
  #receiverAbort: AbortController | undefined;
  #loop: Promise<void> | undefined;
  #stopping = false;
  /** The number of the current receive loop: each stop() moves it on, so an earlier loop is over. */
  #runs = 0;
  /** The release of a delivery a loop took as a stop began (see {@link Dispatcher.#run}). */
  #lateRelease: Promise<void> | undefined;

  constructor(options: DispatcherOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    // The dispatcher's own log lines never throw: a logger that throws in the dead-letter path would
    // otherwise send the delivery back after every attempt, never reaching its dead letter.
    this.#logger = loggingNeverThrows(options.logger ?? consoleLogger);
    this.#concurrency = options.concurrency ?? 16;
    this.#settler = new DeliverySettler(
      options.broker,
      this.#clock,
      this.#logger,
      options.settleTimeoutMs ?? 5_000,
      options.random,
      () => {
        this.#changed();
      },
    );
    if (!Number.isInteger(this.#concurrency) || this.#concurrency < 1) {
      throw new HarrierError(
        'invalid-option',
        `concurrency is ${this.#concurrency}: use a whole number of at least 1`,
      );
    }
    this.#pipeline = new HandlerPipeline(options);
    const outage = resolveOutageOptions(options.outage);
    this.#breaker = new OutageBreaker(
      this.#clock,
      this.#logger,
      { endpoint: options.endpoint },
      outage,
      this.#pipeline.outageListener,
    );
    this.#suspects = new OutageSuspects(this.#breaker, this.#logger, outage.maxProbesPerMessage);
    const pipeline = this.#pipeline;
    const breaker = this.#breaker;
    this.#deadLetters = new DeadLetterRecorder(
      options.deadLetters,
      this.#settler,
      this.#clock,
      this.#logger,
      options.random,
      {
        storeAnswered: () => {
          breaker.succeeded();
        },
        deadLettered: (record, thrown) => {
          pipeline.deadLettered(record, thrown);
        },
      },
    );
  }

  /** True while the endpoint is paused because a dependency is unreachable. */
  isPaused(): boolean {
    return this.#breaker.isPaused();
  }

  /** Handler calls running now. */
  get activeCount(): number {
    return this.#inFlight.size;
  }

  /**
   * Deliveries whose settle step (ack, nack, dead-letter write, replay mark) waits on the clock
   * for its next try: work that only the passing of time can move on (a test bus on a virtual clock
   * moves it forward for them).
   */
  get settleWaitCount(): number {
    return this.#settler.waitCount;
  }

  /** Calls `listener` whenever a delivery starts or settles; returns an unsubscribe function. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Registers the endpoint's subscriptions and starts receiving. */
  async start(): Promise<void> {
    if (this.#loop !== undefined) return;
    this.#stopping = false;
    this.#breaker.reopen();
    await this.#o.broker.register(
      this.#o.endpoint,
      this.#o.registry.subscriptionSpecs({ projections: this.#o.projectionsViaBroker ?? true }),
    );
    this.#o.publisher.routesRegistered(this.#o.broker, this.#o.registry);
    // stop() was called while the broker registered: do not start receiving after it.
    if (this.#isStopping() || this.#isReceiving()) return;
    this.#loop = this.#run(this.#runs);
  }

  /**
   * Stops taking work, lets in-flight handlers finish within the grace period, then releases the
   * deliveries still running for redelivery and aborts their signals.
   */
  async stop(options: StopOptions = {}): Promise<void> {
    const grace = options.gracePeriodMs ?? 10_000;
    this.#stopping = true;
    // Ends the running loop for good, even if its receiver wakes after a later start().
    this.#runs++;
    this.#receiverAbort?.abort();
    this.#breaker.close();
    for (const wake of this.#slotWaiters.splice(0)) wake();
    if (this.#inFlight.size > 0) {
      // Grace is wall time even under a test clock: it bounds how long a real process waits.
      await settlesWithin(this.#whenNoneInFlight(), grace);
    }
    await Promise.all(
      [...this.#inFlight].map(async (flight) => {
        await this.#release(flight);
        this.#inFlight.delete(flight);
      }),
    );
    this.#changed();
    if (
      this.#loop !== undefined &&
      !(await settlesWithin(
        this.#loop.then(() => true),
        RECEIVER_CLOSE_WAIT_MS,
      ))
    ) {
      this.#logger.warn('The broker receiver did not close in time; stopped waiting for it', {
        endpoint: this.#o.endpoint,
        waitedMs: RECEIVER_CLOSE_WAIT_MS,
      });
    }
    this.#loop = undefined;
    // A delivery the loop took as the stop began is being released: its tries are bounded, and
    // stop() does not end before them even when it gave up waiting for the receiver.
    const lateRelease = this.#lateRelease;
    this.#lateRelease = undefined;
    await lateRelease;
  }

  /**
   * Runs a handler for a message `execute` checked (`checkMessage`), in this process, with
   * middleware, and publishes what it recorded once it succeeds; the handler's context builds the
   * envelope only when something reads it.
   */
  invokeChecked(
    entry: HandlerEntry,
    definition: MessageDefinition,
    payload: unknown,
    now: number,
    options: SendOptions,
    signal: AbortSignal,
  ): Promise<unknown> {
    return this.#pipeline.runChecked(entry, definition, payload, now, options, signal);
  }

  /**
   * The receive loop numbered `run`: it is over once a stop() moved `#runs` on, even if a later
   * start() cleared `#stopping` (a stop() that gave up waiting for this loop's receiver to close may
   * be followed by a start() and another loop: this one, if its receiver ever wakes, must not take
   * deliveries beside it).
   */
  async #run(run: number): Promise<void> {
    const over = (): boolean => run !== this.#runs;
    let pause = 100;
    /** A probe admitted and not yet handed to #begin: ended in `finally` if it never gets there. */
    let probeOut = false;
    while (!over()) {
      const abort = new AbortController();
      this.#receiverAbort = abort;
      const receiver = this.#o.broker.receiver({
        endpoint: this.#o.endpoint,
        prefetch: this.#concurrency,
        signal: abort.signal,
      });
      const iterator = receiver[Symbol.asyncIterator]();
      let ended = false;
      try {
        for (;;) {
          // Awaited only when every slot is taken: a free slot costs no promise and no tick.
          if (this.#inFlight.size >= this.#concurrency) await this.#acquireSlot();
          if (over()) break;
          // Paused by an outage: wait for the next probe (this loop's next delivery is the probe).
          let probe = false;
          if (this.#breaker.isPaused()) {
            const admitted = await this.#breaker.admit(abort.signal);
            if (admitted === 'stopped') break;
            probe = probeOut = admitted === 'probe';
            if (over()) break;
          }
          const next = await iterator.next();
          if (next.done === true) {
            ended = true;
            break;
          }
          if (over()) {
            // Taken as stop() began (the receiver answered before it saw the abort), or by a loop a
            // later start() replaced: back to the queue, never handled after the stop. stop() waits
            // for this loop, so for the release too.
            const release = this.#release(new InFlight(next.value));
            this.#lateRelease = release;
            await release;
            break;
          }
          pause = 100;
          if (!probe && this.#breaker.isPaused()) {
            // Asked for before the pause began: back to its queue uncounted, not handled meanwhile.
            await this.#settler.giveBack(new InFlight(next.value));
            continue;
          }
          probeOut = false;
          this.#begin(next.value, probe);
        }
      } catch (error) {
        if (over()) break;
        this.#logger.error('The broker receiver failed; reopening it', {
          endpoint: this.#o.endpoint,
          error: toErrorInfo(error),
          pauseMs: pause,
        });
        await sleep(this.#clock, pause, abort.signal);
        pause = Math.min(pause * 2, 5_000);
        continue;
      } finally {
        if (probeOut) {
          // The probe never reached a handler (the receiver failed or ended, or a stop): the next
          // one goes after the current wait.
          probeOut = false;
          this.#breaker.probeEnded();
        }
        await iterator.return?.().catch(() => undefined);
      }
      // A receiver that ends on its own means the broker closed: nothing more will come.
      if (ended) break;
    }
  }

  /** Sends a delivery back to its queue because the bus is stopping, ending its handler if it runs. */
  async #release(flight: InFlight): Promise<void> {
    flight.release();
    await this.#settler.giveBack(flight);
  }

  #isStopping(): boolean {
    return this.#stopping;
  }

  #isReceiving(): boolean {
    return this.#loop !== undefined;
  }

  #acquireSlot(): Promise<void> {
    if (this.#inFlight.size < this.#concurrency || this.#stopping) return Promise.resolve();
    return new Promise((resolve) => this.#slotWaiters.push(resolve));
  }

  /** Takes a slot for a delivery and starts it: on the eager path unless it records an earlier verdict. */
  #begin(delivery: Delivery, probe = false): void {
    const flight = new InFlight(delivery);
    flight.probe = probe;
    this.#inFlight.add(flight);
    this.#changed();
    const { facts } = delivery;
    if (facts.pendingDeadLetter !== undefined || facts.replayOf !== undefined) {
      void this.#process(flight, undefined);
      return;
    }
    this.#eager(flight);
  }

  /**
   * The fast eager path: the handler runs in this turn, and when it returned a plain value and the
   * broker's ack answers SETTLED, the delivery ends here too: no async function, promise or tick for
   * it. Anything else goes on in {@link Dispatcher.#process} with what was started here.
   */
  #eager(flight: InFlight): void {
    let outcome: PipelineOutcome | Promise<PipelineOutcome>;
    try {
      outcome = this.#pipeline.runEager(flight);
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      outcome = Promise.reject(error);
    }
    if (outcome instanceof Promise || outcome.kind !== 'handled') {
      void this.#process(flight, outcome);
      return;
    }
    const acked = this.#settler.ack(flight);
    if (acked !== SETTLE_DONE) {
      void this.#process(flight, outcome, acked);
      return;
    }
    if (this.#breaker.isPaused()) this.#breaker.succeeded();
    this.#suspects.forget(flight.delivery);
    try {
      this.#pipeline.handled(outcome);
    } catch (error) {
      // Acked already: nothing goes back to the queue.
      void this.#unexpected(flight, error);
    } finally {
      this.#end(flight);
    }
  }

  /**
   * Processes a delivery and frees its slot; never rejects.
   *
   * @param early - the pipeline's outcome when {@link Dispatcher.#begin} ran it already.
   * @param acked - the ack's settling when `#begin` started it already (for a handled outcome).
   */
  async #process(
    flight: InFlight,
    early: PipelineOutcome | Promise<PipelineOutcome> | undefined,
    acked?: Promise<SettleResult>,
  ): Promise<void> {
    // One async function with its own catch and finally: no `then` and no closures per delivery.
    try {
      const { delivery } = flight;
      const { facts } = delivery;
      const pending = facts.pendingDeadLetter;
      if (pending !== undefined) {
        // An earlier delivery decided to dead-letter this message and could not record it: record it
        // now, without running the handler again.
        const type = facts.type;
        await this.#deadLetters.record(
          flight,
          pending.handler,
          pending.reason,
          pending.error,
          type === undefined ? false : (this.#o.registry.definition(type)?.ordered ?? false),
          pending.error,
          pending,
        );
        return;
      }
      const outcome = await (early ?? this.#pipeline.run(flight));
      switch (outcome.kind) {
        case 'abandoned':
          return;
        case 'paused': {
          const failure = this.#suspects.paused(flight, outcome);
          if (failure === undefined) {
            // An outage, not the message's failure: back uncounted, and the endpoint pauses.
            await this.#settler.giveBack(flight);
            return;
          }
          await this.#settleFailure(flight, failure);
          return;
        }
        case 'handled': {
          this.#breaker.succeeded();
          this.#suspects.forget(delivery);
          const ackResult = await (acked ?? this.#settler.ack(flight));
          // The handler ran it to success: that is the replay's outcome, whether the ack answered in
          // time or a retry of it was refused as stale (an ack that applied late looks the same as a
          // lost lock; if the message does come back and dies, the record is dead again and that
          // outcome wins). A failed ack means it comes back, and its next delivery records the outcome.
          // Before the onHandled hook, so whoever hears "handled" reads the outcome too.
          if (facts.replayOf !== undefined && ackResult !== 'failed') {
            await this.#deadLetters.markReplayHandled(flight, facts.replayOf);
          }
          this.#pipeline.handled(outcome);
          return;
        }
        case 'retry':
        case 'dead-letter':
          // The handler failed on its own: whatever it depends on answered.
          if (outcome.kind === 'retry') this.#breaker.succeeded();
          await this.#settleFailure(flight, outcome);
      }
    } catch (error) {
      await this.#unexpected(flight, error);
    } finally {
      this.#end(flight);
    }
  }

  /**
   * A failure of the dispatcher itself (a bug, or a logger that throws): logged, and a delivery whose
   * settling has not begun goes back to its queue with backoff, as a failed attempt, so it is never
   * held unsettled (a BullMQ job would stay locked while the worker lives). Never throws.
   */
  async #unexpected(flight: InFlight, error: unknown): Promise<void> {
    // The dispatcher's logger never throws (see loggingNeverThrows).
    this.#logger.error('Unexpected dispatcher failure; the delivery goes back to its queue', {
      deliveryId: flight.delivery.id,
      error: toErrorInfo(error),
    });
    await this.#settler.afterFailure(flight, error);
  }

  /** Settles a failure of the message: back with its retry time, or dead-lettered. */
  async #settleFailure(flight: InFlight, outcome: RetryOutcome | DeadLetterOutcome): Promise<void> {
    if (outcome.kind === 'retry') {
      await (outcome.uncounted === true
        ? this.#settler.releaseUntil(flight, outcome.retryAt)
        : this.#settler.retryAt(flight, outcome.retryAt, outcome.errorInfo));
      this.#pipeline.retrying(outcome);
      return;
    }
    await this.#deadLetters.record(
      flight,
      outcome.handler,
      outcome.reason,
      outcome.error,
      outcome.ordered,
      outcome.thrown,
    );
  }

  /** Frees a delivery's slot once it is processed. */
  #end(flight: InFlight): void {
    // A probe that ended without a verdict on the dependency (its dead letter could not be stored, a
    // failure of the dispatcher) lets the next probe go rather than leave the endpoint waiting.
    if (flight.probe) this.#breaker.probeEnded();
    this.#inFlight.delete(flight);
    this.#slotWaiters.shift()?.();
    this.#changed();
  }

  #whenNoneInFlight(): Promise<void> {
    return new Promise((resolve) => {
      const check = (): void => {
        if (this.#inFlight.size === 0) {
          unsubscribe();
          resolve();
        }
      };
      const unsubscribe = this.onChange(check);
      check();
    });
  }

  #changed(): void {
    if (this.#listeners.size === 0) return;
    for (const listener of this.#listeners) listener();
  }
}
