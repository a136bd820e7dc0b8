import { systemClock } from '../clock/clock.js';
import type { DeadLetterRecord } from '../dead-letters/dead-letter-store.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { consoleLogger } from '../logging/logger.js';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../messages/codec.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { SendOptions } from '../messages/send-options.js';
import { HandlerAttempt } from './handler-attempt.js';
import { HandlerCall } from './handler-call.js';
import type { HandlerContext } from './handler-context.js';
import { HandlerContextFactory } from './handler-context-factory.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import { LocalExecution } from './local-execution.js';
import { MessageAdmission } from './message-admission.js';
import type { OutageListener } from './outage-breaker.js';
import { OutcomeReporter } from './outcome-reporter.js';
import type { PipelineInput } from './pipeline-input.js';
import type { DeadLetterOutcome, HandledOutcome, PipelineOutcome, RetryOutcome } from './pipeline-outcome.js';

/**
 * The one way a received message reaches a handler: decode, verify, route, retry policy, context,
 * middleware, invoke, commit of what the handler recorded; the outcome says how to settle it.
 *
 * @remarks
 * The {@link Dispatcher} settles an outcome on the broker (ack, nack with a retry time, dead letter),
 * the `ProjectionRunner` in its lane (retry in place, checkpoint, poison policy); both report the
 * settled outcome back ({@link HandlerPipeline.handled} and friends) so the lifecycle hooks fire
 * once it is final. Nothing here knows who delivered the message.
 *
 * The pipeline puts its parts together: {@link MessageAdmission} (decode, signature, route, attempt
 * limit), {@link HandlerAttempt} (one run of the handler and its outcome), {@link HandlerCall}
 * (middleware, the handler, its time-out), {@link OutcomeReporter} (hooks and telemetry) and
 * {@link LocalExecution} (`execute`).
 */
export class HandlerPipeline {
  /** Decode, signature, route and attempt limit: whether a message gets an attempt at all. */
  readonly #admission: MessageAdmission<PipelineOutcome | Promise<PipelineOutcome>>;
  readonly #local: LocalExecution;
  readonly #contexts: HandlerContextFactory;
  readonly #reporter: OutcomeReporter;
  /** Tells the hooks and telemetry of pauses and resumptions (what an `OutageBreaker` reports). */
  readonly outageListener: OutageListener;

  /**
   * @throws HarrierError `invalid-option` for a bad `retry`, `handlerTimeoutMs` or a handler's
   * `timeoutMs`.
   */
  constructor(options: HandlerPipelineOptions) {
    const clock = options.clock ?? systemClock;
    const logger = options.logger ?? consoleLogger;
    const maxBytes = options.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
    const call = new HandlerCall(options, clock, logger);
    this.#reporter = new OutcomeReporter(options, clock, logger);
    this.outageListener = this.#reporter.outageListener;
    this.#contexts = new HandlerContextFactory(options, clock, maxBytes);
    const attempt = new HandlerAttempt(options, clock, logger, call, this.#contexts, this.#reporter);
    this.#admission = new MessageAdmission(
      options,
      maxBytes,
      this.#reporter,
      (entry, definition, envelope, policy, input) => attempt.run(entry, definition, envelope, policy, input),
    );
    this.#local = new LocalExecution(options, call, this.#contexts, this.#reporter);
  }

  /** Runs one received message; never throws for anything the message or its handler does. */
  run(input: PipelineInput): Promise<PipelineOutcome> {
    const outcome = this.runEager(input);
    return outcome instanceof Promise ? outcome : Promise.resolve(outcome);
  }

  /**
   * As {@link HandlerPipeline.run}, but answers the outcome itself when nothing had to be waited for:
   * a refusal, or a handler that returned a plain value and recorded nothing, with no middleware
   * promise, unit of work, step runner or telemetry around it.
   *
   * @remarks
   * The dispatcher then acks in the same turn: no promise is made for the attempt and none is
   * awaited (see the Redis section of docs/benchmarks.md). A throw of a bug here is the
   * caller's to catch.
   */
  runEager(input: PipelineInput): PipelineOutcome | Promise<PipelineOutcome> {
    return this.#admission.admit(input);
  }

  /**
   * Runs a handler for a message `execute` made and checked (`checkMessage`): context,
   * middleware, invoke, commit, with no decoding, verification or retries (errors reach the caller),
   * and a {@link LocalHandlerContext} that builds the envelope (id, time, meta) only when the
   * handler, a middleware, the unit of work or telemetry reads it.
   *
   * @param payload - the payload as its schema parsed it.
   * @param now - the clock time of the call (the envelope's time and its id's).
   * @param options - the caller's options (copied by the context, unless it is `NO_OPTIONS`).
   */
  runChecked(
    entry: HandlerEntry,
    definition: MessageDefinition,
    payload: unknown,
    now: number,
    options: SendOptions,
    signal: AbortSignal,
  ): Promise<unknown> {
    return this.#local.run(entry, definition, payload, now, options, signal);
  }

  /** The context of one handler call; a projection's refuses `send` and `publish`. */
  context(
    envelope: Envelope,
    attempt: number,
    entry: HandlerEntry,
    signal: AbortSignal | (() => AbortSignal),
  ): HandlerContext {
    return this.#contexts.received(envelope, attempt, entry, signal);
  }

  /** Reports a handled outcome once it is settled (acked, or completed in its lane). */
  handled(outcome: HandledOutcome): void {
    this.#reporter.handled(outcome);
  }

  /** Reports a retry once it is settled (nacked with its time, or waiting in its lane). */
  retrying(outcome: RetryOutcome): void {
    this.#reporter.retrying(outcome);
  }

  /** Reports a dead letter once it is stored. */
  deadLettered(record: DeadLetterRecord, error: unknown): void {
    this.#reporter.deadLettered(record, error);
  }

  /**
   * Tells telemetry of a message refused before any handler ran, once it is dead-lettered (the
   * `ProjectionRunner` calls it when it stores one; the pipeline itself for other callers).
   */
  reportRefused(outcome: DeadLetterOutcome, attempt: number): void {
    this.#reporter.refused(outcome, attempt);
  }
}
