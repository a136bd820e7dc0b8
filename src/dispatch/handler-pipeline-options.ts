import type { Clock } from '../clock/clock.js';
import type { HandlerKind } from '../handlers/handler-metadata.js';
import type { HandlerEntry, HandlerRegistry } from '../handlers/handler-registry.js';
import type { Logger } from '../logging/logger.js';
import type { RetryOptions } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { EnvelopeEncoder } from '../messages/prepare-message.js';
import type { DispatchHooks } from './dispatch-hooks.js';
import type { HandlerContext } from './handler-context.js';
import type { MessagePublisher } from './message-publisher.js';
import type { MessageTelemetry } from './message-telemetry.js';
import type { Middleware } from './middleware.js';
import type { OutageOptions } from './outage-breaker.js';
import type { StepRunner } from './step-runner.js';
import type { TransactionalUnitOfWork } from './transactional-unit-of-work.js';
import type { TransientClassifier } from './transient-failure.js';

/** Options of {@link HandlerPipeline}: what every handler run needs, whoever settles it. */
export interface HandlerPipelineOptions {
  readonly registry: HandlerRegistry;
  /** The endpoint handlers run for (named in contexts and dead letters). */
  readonly endpoint: string;
  readonly invoke: HandlerInvoker;
  /**
   * Commits what a handler recorded, after it succeeded.
   * @defaultValue none: a handler that sends or publishes fails with HarrierError `internal`
   */
  readonly publisher?: MessagePublisher;
  /**
   * Classifies failures as outages of a dependency (true) or message failures (false); `undefined`
   * leaves the error to Harrier's rules (`TransientError`, connection errors of PostgreSQL and Redis,
   * socket errors). An outage pauses the endpoint and spends no attempt.
   * @defaultValue Harrier's rules only (see `isTransientFailure`)
   */
  readonly isTransient?: TransientClassifier;
  /**
   * How a paused endpoint or projection lane probes for the end of an outage.
   * @defaultValue `{ probeBaseMs: 1000, probeMaxMs: 15000, maxProbesPerMessage: 10 }`
   */
  readonly outage?: OutageOptions;
  /**
   * Retry policy where neither the handler nor the definition sets one.
   * @defaultValue `DEFAULT_RETRY`: 8 attempts, 2 immediate retries, then backoff 2.5 s base doubling, 60 s cap, 0.2 jitter
   */
  readonly retry?: RetryOptions;
  /**
   * How many deliveries of a message may end unsettled (`DeliveryFacts.unsettledEnds`: the worker
   * holding it died, or lost its hold) before its next delivery is dead-lettered as
   * `worker-crashed` without running the handler. A whole number of at least 1.
   * @defaultValue 3
   */
  readonly crashLimit?: number;
  /** @defaultValue [] */
  readonly middleware?: readonly Middleware[];
  /**
   * Observes every handler call and gives the traceparent of each message a handler records
   * (harrier/telemetry's spans and metrics).
   * @defaultValue none: no observation, and recorded messages carry the handled message's traceparent
   */
  readonly telemetry?: MessageTelemetry;
  /** @defaultValue {} */
  readonly hooks?: DispatchHooks;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /**
   * How long a handler call (with its middleware) may run, in ms of `clock` time, where its
   * decorator sets no `timeoutMs`: past it, the call's signal aborts with HarrierError
   * `handler-timeout` and the attempt fails with that error (retried, then dead-lettered), or
   * `execute` rejects with it; what the call does afterwards is logged and ignored. Only a call that
   * returns a promise is timed (a plain value has returned already). Above 0 and at most 2147483647.
   * @defaultValue 300000 (5 minutes)
   */
  readonly handlerTimeoutMs?: number;
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
   * How handlers of a kind are run and committed, where it differs from a plain call then commit
   * (a saga step loads and saves its instance around the call).
   * @defaultValue none (every kind: call, then commit)
   */
  readonly steps?: Partial<Record<HandlerKind, StepRunner>>;
  /**
   * The transaction command handlers, event handlers and projections run in, with what they record
   * and the proof they ran (an outbox and inbox in the application's database).
   * @defaultValue none: the handler runs, then the publisher commits what it recorded
   */
  readonly unitOfWork?: TransactionalUnitOfWork;
}

/**
 * Calls a handler method on an instance made for this message (the bus resolves it from DI).
 *
 * @remarks
 * Returns what the method returned: a promise, or a plain value when the handler returned one (no
 * promise is made for a synchronous handler). What it throws is the handler's failure, as a
 * rejection would be.
 */
export type HandlerInvoker = (
  entry: HandlerEntry,
  method: string,
  payload: unknown,
  context: HandlerContext,
) => unknown;

/** Checks a received envelope's signature; returns a refusal reason, or undefined when it verifies. */
export type EnvelopeVerifier = (body: string, envelope: Envelope) => string | undefined;
