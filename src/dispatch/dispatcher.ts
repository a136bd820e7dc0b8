import {
  toErrorInfo,
  type Delivery,
  type DeliveryFacts,
  type ErrorInfo,
  type MessageBroker,
  type PendingDeadLetter,
} from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { settlesWithin, withDeadline } from '../clock/deadline.js';
import { buildDeadLetterRecord } from '../dead-letters/dead-letter-record.js';
import type {
  DeadLetterReason,
  DeadLetterRecord,
  DeadLetterStore,
} from '../dead-letters/dead-letter-store.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry, HandlerRegistry } from '../handlers/handler-registry.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { DEFAULT_MAX_ENVELOPE_BYTES, decodeEnvelope, encodeEnvelope } from '../messages/codec.js';
import type { MessageDefinition, RetryOptions } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import { HandlerContext, type HandlerContextEnv } from './handler-context.js';
import type { MessagePublisher } from './message-publisher.js';
import { composeMiddleware, type Middleware } from './middleware.js';
import type { EnvelopeEncoder } from '../messages/prepare-message.js';
import {
  DEFAULT_RETRY,
  backoffDelay,
  isPermanent,
  resolveRetryPolicy,
  type RetryPolicy,
} from './retry-policy.js';

/** Calls a handler method on an instance made for this message (the bus resolves it from DI). */
export type HandlerInvoker = (
  entry: HandlerEntry,
  method: string,
  payload: unknown,
  context: HandlerContext,
) => Promise<unknown>;

/** Checks a received envelope's signature; returns a refusal reason, or undefined when it verifies. */
export type EnvelopeVerifier = (body: string, envelope: Envelope) => string | undefined;

/** A message was handled and acknowledged. */
export interface HandledEvent {
  readonly envelope: Envelope;
  readonly handler: string;
  readonly attempt: number;
  readonly durationMs: number;
}

/** A handler failed and its message will be tried again. */
export interface RetryingEvent {
  readonly envelope: Envelope;
  readonly handler: string;
  readonly attempt: number;
  readonly error: unknown;
  readonly retryAt: number;
}

/** A message was dead-lettered. */
export interface DeadLetteredEvent {
  readonly record: DeadLetterRecord;
  /** The error thrown, or a description of the bad input. */
  readonly error: unknown;
}

/** Lifecycle hooks of the dispatcher; an error thrown by a hook is logged and ignored. */
export interface DispatchHooks {
  onHandled?(event: HandledEvent): void;
  onRetrying?(event: RetryingEvent): void;
  onDeadLettered?(event: DeadLetteredEvent): void;
}

/** Options of {@link Dispatcher}. */
export interface DispatcherOptions {
  readonly broker: MessageBroker;
  readonly registry: HandlerRegistry;
  /** The endpoint this dispatcher receives for. */
  readonly endpoint: string;
  readonly deadLetters: DeadLetterStore;
  readonly invoke: HandlerInvoker;
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
   * Retry policy where neither the handler nor the definition sets one.
   * @defaultValue 5 attempts, backoff 200 ms base, 60 s cap, 0.2 jitter
   */
  readonly retry?: RetryOptions;
  /** @defaultValue [] */
  readonly middleware?: readonly Middleware[];
  /** @defaultValue {} */
  readonly hooks?: DispatchHooks;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /**
   * Largest encoded envelope accepted, in bytes; larger ones are dead-lettered as `too-large`.
   * @defaultValue 1048576 (1 MiB)
   */
  readonly maxEnvelopeBytes?: number;
  /** @defaultValue JSON lines on stderr for warnings and errors */
  readonly logger?: Logger;
  /** Random source of backoff jitter. @defaultValue Math.random */
  readonly random?: () => number;
  /** Encodes envelopes of recorded messages. @defaultValue JSON */
  readonly encode?: EnvelopeEncoder;
  /** Verifies received envelopes. @defaultValue none (no signing) */
  readonly verify?: EnvelopeVerifier;
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

interface InFlight {
  readonly delivery: Delivery;
  /** Made only when the handler reads its signal (see {@link InFlight.signal}). */
  abort: AbortController | undefined;
  /** Why the delivery was aborted, once it was. */
  abortReason: unknown;
  released: boolean;
  /** A dead-lettering decided and not yet recorded: a stop sends it back with it, never plain. */
  decided: PendingDeadLetter | undefined;
}

/** The handler's abort signal of a delivery, made on first read. */
function flightSignal(flight: InFlight): AbortSignal {
  if (flight.abort === undefined) {
    flight.abort = new AbortController();
    if (flight.released) flight.abort.abort(flight.abortReason);
  }
  return flight.abort.signal;
}

/** Options of {@link Dispatcher.stop}. */
export interface StopOptions {
  /**
   * How long in-flight handlers may run after `stop()` before their deliveries are released.
   * @defaultValue 10000
   */
  readonly gracePeriodMs?: number;
}

/** Tries of an ack or a nack before the dispatcher gives up on it (the broker redelivers). */
const SETTLE_ATTEMPTS = 8;

/** Tries of releasing a delivery still running when the grace period of `stop()` ran out. */
const RELEASE_TRIES = 2;

/**
 * Tries of storing a dead letter before the delivery goes back to its queue with backoff, the
 * dead-lettering kept beside it for the next delivery to record.
 */
export const DEAD_LETTER_STORE_TRIES = 3;

/** Backoff of a delivery whose dead letter could not be stored: 1 s doubling to 60 s, jitter 0.2. */
const STORE_RETRY: RetryPolicy = { ...DEFAULT_RETRY, baseMs: 1_000 };

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
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #concurrency: number;
  readonly #maxBytes: number;
  readonly #settleTimeoutMs: number;
  readonly #encode: EnvelopeEncoder;
  readonly #inFlight = new Set<InFlight>();
  readonly #listeners = new Set<() => void>();
  readonly #slotWaiters: (() => void)[] = [];
  readonly #policies = new WeakMap<HandlerEntry, Map<string, RetryPolicy>>();
  #receiverAbort: AbortController | undefined;
  /** What every HandlerContext needs from the dispatcher. */
  readonly #contextEnv: HandlerContextEnv;
  #loop: Promise<void> | undefined;
  #stopping = false;

  constructor(options: DispatcherOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? consoleLogger;
    this.#concurrency = options.concurrency ?? 16;
    this.#maxBytes = options.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
    this.#settleTimeoutMs = options.settleTimeoutMs ?? 5_000;
    if (!Number.isFinite(this.#settleTimeoutMs) || this.#settleTimeoutMs <= 0) {
      throw new HarrierError(
        'invalid-option',
        `settleTimeoutMs is ${this.#settleTimeoutMs}: use a number of milliseconds above 0`,
      );
    }
    this.#encode = options.encode ?? encodeEnvelope;
    this.#contextEnv = { now: () => this.#clock.now(), maxBytes: this.#maxBytes, encode: this.#encode };
    if (!Number.isInteger(this.#concurrency) || this.#concurrency < 1) {
      throw new HarrierError(
        'invalid-option',
        `concurrency is ${this.#concurrency}: use a whole number of at least 1`,
      );
    }
    resolveRetryPolicy(options.retry);
  }

  /** Handler calls running now. */
  get activeCount(): number {
    return this.#inFlight.size;
  }

  /** Calls `listener` whenever a delivery starts or settles; returns an unsubscribe function. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Registers the endpoint's subscriptions and starts receiving. */
  async start(): Promise<void> {
    if (this.#loop !== undefined) return;
    await this.#o.broker.register(
      this.#o.endpoint,
      this.#o.registry.subscriptionSpecs({ projections: this.#o.projectionsViaBroker ?? true }),
    );
    this.#stopping = false;
    this.#loop = this.#run();
  }

  /**
   * Stops taking work, lets in-flight handlers finish within the grace period, then releases the
   * deliveries still running for redelivery and aborts their signals.
   */
  async stop(options: StopOptions = {}): Promise<void> {
    const grace = options.gracePeriodMs ?? 10_000;
    this.#stopping = true;
    this.#receiverAbort?.abort();
    for (const wake of this.#slotWaiters.splice(0)) wake();
    if (this.#inFlight.size > 0) {
      // Grace is wall time even under a test clock: it bounds how long a real process waits.
      await settlesWithin(this.#whenNoneInFlight(), grace);
    }
    await Promise.all(
      [...this.#inFlight].map(async (flight) => {
        flight.released = true;
        flight.abortReason = new HarrierError('stopping', 'The bus is stopping and the grace period ran out');
        flight.abort?.abort(flight.abortReason);
        const { decided } = flight;
        // A decided dead letter goes back with its decision, so the next delivery records it
        // instead of running the handler again.
        await this.#settle(
          flight,
          'release',
          () =>
            this.#o.broker.nack(
              flight.delivery.id,
              decided === undefined
                ? { release: true }
                : { retryAt: this.#clock.now(), pendingDeadLetter: decided },
            ),
          RELEASE_TRIES,
        );
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
  }

  /**
   * Runs a handler for an envelope in this process (used by `execute`), with middleware, and
   * publishes what it recorded once it succeeds.
   */
  async invokeLocal(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    signal: AbortSignal,
  ): Promise<unknown> {
    const context = this.#context(envelope, 1, entry, signal);
    const result = await this.#call(entry, definition, envelope, context, true);
    await this.#flush(context);
    return result;
  }

  #context(
    envelope: Envelope,
    attempt: number,
    entry: HandlerEntry,
    signal: AbortSignal | (() => AbortSignal),
  ): HandlerContext {
    return new HandlerContext(envelope, attempt, this.#o.endpoint, entry.name, signal, this.#contextEnv);
  }

  async #call(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    context: HandlerContext,
    inProcess: boolean,
  ): Promise<unknown> {
    const method = entry.methods.get(envelope.type) ?? 'handle';
    const call = (): Promise<unknown> => this.#o.invoke(entry, method, envelope.payload, context);
    const middleware = this.#o.middleware ?? [];
    // `return await`, not `return`: one tick instead of two when the result is a promise.
    if (middleware.length === 0) return await call();
    return composeMiddleware(
      middleware,
      { definition, handler: entry.name, handlerKind: entry.kind, message: context, inProcess },
      call,
      (m, error) => {
        this.#logger.error('Middleware after() threw; ignored', {
          middleware: m.name ?? 'middleware',
          error: toErrorInfo(error),
        });
      },
    );
  }

  async #flush(context: HandlerContext): Promise<void> {
    if (context.recorded.length === 0) return;
    const messages = context.recorded.map((p) => p.outgoing);
    await this.#o.publisher.publish(messages);
  }

  async #run(): Promise<void> {
    let pause = 100;
    while (!this.#isStopping()) {
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
          await this.#acquireSlot();
          if (this.#isStopping()) break;
          const next = await iterator.next();
          if (next.done === true) {
            ended = true;
            break;
          }
          pause = 100;
          this.#begin(next.value);
        }
      } catch (error) {
        if (this.#isStopping()) break;
        this.#logger.error('The broker receiver failed; reopening it', {
          endpoint: this.#o.endpoint,
          error: toErrorInfo(error),
          pauseMs: pause,
        });
        await new Promise<void>((resolve) => setTimeout(resolve, pause).unref());
        pause = Math.min(pause * 2, 5_000);
        continue;
      } finally {
        await iterator.return?.().catch(() => undefined);
      }
      // A receiver that ends on its own means the broker closed: nothing more will come.
      if (ended) break;
    }
  }

  /** The retry policy of a handler for a definition, resolved once. */
  #policy(entry: HandlerEntry, definition: MessageDefinition): RetryPolicy {
    let byType = this.#policies.get(entry);
    if (byType === undefined) {
      byType = new Map();
      this.#policies.set(entry, byType);
    }
    let policy = byType.get(definition.type);
    if (policy === undefined) {
      policy = resolveRetryPolicy(entry.options.retry, definition.retry, this.#o.retry);
      byType.set(definition.type, policy);
    }
    return policy;
  }

  #isStopping(): boolean {
    return this.#stopping;
  }

  #acquireSlot(): Promise<void> {
    if (this.#inFlight.size < this.#concurrency || this.#stopping) return Promise.resolve();
    return new Promise((resolve) => this.#slotWaiters.push(resolve));
  }

  #begin(delivery: Delivery): void {
    const flight: InFlight = {
      delivery,
      abort: undefined,
      abortReason: undefined,
      released: false,
      decided: undefined,
    };
    this.#inFlight.add(flight);
    this.#changed();
    const end = (): void => {
      this.#inFlight.delete(flight);
      this.#slotWaiters.shift()?.();
      this.#changed();
    };
    void this.#process(flight).then(end, (error: unknown) => {
      this.#logger.error('Unexpected dispatcher failure; delivery left for redelivery', {
        error: toErrorInfo(error),
      });
      end();
    });
  }

  async #process(flight: InFlight): Promise<void> {
    const { delivery } = flight;
    const { facts } = delivery;
    const pending = facts.pendingDeadLetter;
    if (pending !== undefined) {
      // An earlier delivery decided to dead-letter this message and could not record it: record it
      // now, without running the handler again.
      const type = facts.type;
      await this.#deadLetter(
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
    const decoded = decodeEnvelope(delivery.body, (type) => this.#o.registry.definition(type), {
      maxBytes: this.#maxBytes,
    });
    if (!decoded.ok) {
      const handler =
        facts.handler ??
        (decoded.envelope ? this.#o.registry.singleHandler(decoded.envelope.type)?.name : undefined);
      const ordered = decoded.envelope
        ? (this.#o.registry.definition(decoded.envelope.type)?.ordered ?? false)
        : false;
      await this.#deadLetter(
        flight,
        handler,
        decoded.reason,
        { name: 'MessageDecodeError', message: decoded.message, code: decoded.reason },
        ordered,
      );
      return;
    }
    const { envelope, definition } = decoded;
    const refusal = this.#o.verify?.(delivery.body, envelope);
    if (refusal !== undefined) {
      await this.#deadLetter(
        flight,
        facts.handler ?? this.#o.registry.singleHandler(envelope.type)?.name,
        'signature-invalid',
        { name: 'SignatureError', message: refusal, code: 'signature-invalid' },
        definition.ordered,
      );
      return;
    }
    const entry = this.#route(envelope, facts);
    if (entry === undefined) {
      await this.#deadLetter(
        flight,
        facts.handler,
        'no-handler',
        {
          name: 'HandlerNotFoundError',
          message: `No handler for ${envelope.kind} "${envelope.type}"${facts.handler !== undefined ? ` in subscription "${facts.handler}"` : ''} on endpoint "${this.#o.endpoint}"`,
          code: 'no-handler',
        },
        definition.ordered,
      );
      return;
    }
    const policy = this.#policy(entry, definition);
    if (facts.attempt > policy.attempts) {
      // Only a worker that died mid-handler gets here (its crash counted as an attempt): stop the loop.
      const last = facts.history[facts.history.length - 1]?.error;
      await this.#deadLetter(
        flight,
        entry.name,
        entry.kind === 'projection' ? 'projection-failed' : 'handler-failed',
        last ?? {
          name: 'WorkerCrashedError',
          message: `Attempt ${facts.attempt} of at most ${policy.attempts}: the workers handling this message stopped before settling it`,
          code: 'worker-crashed',
        },
        definition.ordered,
      );
      return;
    }
    const started = this.#clock.now();
    const context = this.#context(envelope, facts.attempt, entry, () => flightSignal(flight));
    try {
      await this.#call(entry, definition, envelope, context, false);
      if (flight.released) return;
      await this.#flush(context);
    } catch (error) {
      if (flight.released) return;
      const errorInfo = toErrorInfo(error);
      if (!isPermanent(policy, error) && facts.attempt < policy.attempts) {
        const retryAt = this.#clock.now() + backoffDelay(policy, facts.attempt, this.#o.random);
        this.#logger.warn('Handler failed; will retry', {
          handler: entry.name,
          type: envelope.type,
          messageId: envelope.id,
          attempt: facts.attempt,
          retryAt,
          error: errorInfo.message,
        });
        await this.#settle(flight, 'nack', () =>
          this.#o.broker.nack(delivery.id, { retryAt, error: errorInfo }),
        );
        this.#hook('onRetrying', () =>
          this.#o.hooks?.onRetrying?.({
            envelope,
            handler: entry.name,
            attempt: facts.attempt,
            error,
            retryAt,
          }),
        );
        return;
      }
      await this.#deadLetter(
        flight,
        entry.name,
        entry.kind === 'projection' ? 'projection-failed' : 'handler-failed',
        errorInfo,
        definition.ordered,
        error,
      );
      return;
    }
    await this.#settle(flight, 'ack', () => this.#o.broker.ack(delivery.id));
    const durationMs = this.#clock.now() - started;
    this.#hook('onHandled', () =>
      this.#o.hooks?.onHandled?.({ envelope, handler: entry.name, attempt: facts.attempt, durationMs }),
    );
  }

  #route(envelope: Envelope, facts: DeliveryFacts): HandlerEntry | undefined {
    if (envelope.kind === 'event') {
      if (facts.handler === undefined) return undefined;
      const entry = this.#o.registry.subscription(facts.handler);
      return entry?.methods.has(envelope.type) === true ? entry : undefined;
    }
    if (envelope.kind === 'command') {
      const entry = this.#o.registry.singleHandler(envelope.type);
      return entry?.kind === 'command' ? entry : undefined;
    }
    return undefined;
  }

  async #deadLetter(
    flight: InFlight,
    handler: string | undefined,
    reason: DeadLetterReason,
    error: ErrorInfo,
    ordered: boolean,
    thrown: unknown = error,
    pending?: PendingDeadLetter,
  ): Promise<void> {
    const { delivery } = flight;
    const { facts } = delivery;
    const record = buildDeadLetterRecord({
      body: delivery.body,
      // A pending dead-lettering is recorded as it was decided: its attempt, not this redelivery's.
      facts: pending === undefined ? facts : { ...facts, attempt: pending.attempt },
      handler,
      reason,
      error,
      ordered,
      now: pending?.at ?? this.#clock.now(),
    });
    this.#logger.warn('Message dead-lettered', {
      reason,
      handler,
      type: record.type,
      messageId: record.messageId,
      error: error.message,
    });
    flight.decided = pending ?? {
      reason,
      attempt: facts.attempt,
      at: record.lastFailedAt,
      error,
      ...(handler !== undefined ? { handler } : {}),
    };
    const stored = await this.#settle(
      flight,
      'dead-letter store',
      () => this.#o.deadLetters.add(record),
      DEAD_LETTER_STORE_TRIES,
    );
    if (stored === 'stale' || flight.released) return;
    if (stored === 'failed') {
      // Never hold the delivery: it goes back to its queue with backoff, the decision kept beside it,
      // and a later delivery records the dead letter (the handler does not run again).
      const failures = pending === undefined ? 1 : Math.max(1, facts.attempt - pending.attempt + 1);
      const retryAt = this.#clock.now() + backoffDelay(STORE_RETRY, failures, this.#o.random);
      this.#logger.error('The dead letter could not be stored; the message goes back to its queue', {
        deliveryId: delivery.id,
        messageId: record.messageId,
        reason,
        retryAt,
      });
      await this.#settle(flight, 'nack', () =>
        this.#o.broker.nack(delivery.id, {
          retryAt,
          pendingDeadLetter: flight.decided,
        }),
      );
      return;
    }
    await this.#settle(flight, 'nack', () => this.#o.broker.nack(delivery.id, { deadLetter: reason, error }));
    this.#hook('onDeadLettered', () => this.#o.hooks?.onDeadLettered?.({ record, error: thrown }));
  }

  /**
   * Runs a settle step, each try bounded by `settleTimeoutMs`, retrying with backoff; never throws.
   * Stops early once the delivery is released by `stop()` (unless this is the release itself).
   */
  async #settle(
    flight: InFlight,
    what: string,
    step: () => Promise<unknown>,
    tries = SETTLE_ATTEMPTS,
  ): Promise<'done' | 'stale' | 'failed'> {
    const { delivery } = flight;
    let pause = 50;
    for (let attempt = 1; ; attempt++) {
      try {
        await withDeadline(
          step(),
          this.#settleTimeoutMs,
          () => new HarrierError('settle-timeout', `${what} took longer than ${this.#settleTimeoutMs} ms`),
        );
        return 'done';
      } catch (error) {
        if (HarrierError.is(error) && error.code === 'stale-delivery') {
          this.#logger.warn(`${what} refused: the delivery is stale (redelivered elsewhere)`, {
            deliveryId: delivery.id,
          });
          return 'stale';
        }
        if (attempt >= tries) {
          this.#logger.error(`${what} failed ${attempt} times; giving up on it`, {
            deliveryId: delivery.id,
            error: toErrorInfo(error),
          });
          return 'failed';
        }
        this.#logger.error(`${what} failed; retrying`, {
          deliveryId: delivery.id,
          attempt,
          error: toErrorInfo(error),
        });
        await new Promise<void>((resolve) => setTimeout(resolve, pause).unref());
        pause = Math.min(pause * 2, 5_000);
        if (flight.released && what !== 'release') return 'failed';
      }
    }
  }

  #hook(name: string, call: () => void): void {
    try {
      call();
    } catch (error) {
      this.#logger.error(`Hook ${name} threw; ignored`, { error: toErrorInfo(error) });
    }
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
    for (const listener of this.#listeners) listener();
  }
}
