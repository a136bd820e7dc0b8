import {
  toErrorInfo,
  type DeliveryFacts,
  type ErrorInfo,
  type OutgoingMessage,
} from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import type { DeadLetterRecord } from '../dead-letters/dead-letter-store.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { DEFAULT_MAX_ENVELOPE_BYTES } from '../messages/codec.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { SendOptions } from '../messages/send-options.js';
import { commitRecorded, publishRecorded } from './commit-recorded.js';
import { HandlerCall, isThenable, type CallTarget } from './handler-call.js';
import type { HandlerContext, LocalHandlerContext } from './handler-context.js';
import { HandlerContextFactory } from './handler-context-factory.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import { MessageAdmission } from './message-admission.js';
import type { ProcessObservation } from './message-telemetry.js';
import type { OutageListener } from './outage-breaker.js';
import { HANDLED_END, OutcomeReporter, processEnd } from './outcome-reporter.js';
import type { PipelineInput } from './pipeline-input.js';
import {
  ABANDONED,
  NO_OUTGOING,
  failureReason,
  handledOutcome,
  refused,
  type DeadLetterOutcome,
  type HandledOutcome,
  type PipelineOutcome,
  type RetryOutcome,
} from './pipeline-outcome.js';
import { backoffDelay, isPermanent, type RetryPolicy } from './retry-policy.js';
import type { PipelineStep, StepRunner } from './step-runner.js';
import type { TransactionalUnitOfWork, UnitOfWorkResult } from './transactional-unit-of-work.js';
import { isTransientFailure } from './transient-failure.js';

/**
 * What `execute` of a void handler that recorded nothing returns: one fulfilled promise shared by
 * every such call (frozen, so no caller can hang properties on another's), which means two calls may
 * return the same promise object.
 */
const RESOLVED_VOID: Promise<unknown> = Object.freeze(Promise.resolve(undefined));

/**
 * The one way a received message reaches a handler: decode, verify, route, retry policy, context,
 * middleware, invoke, commit of what the handler recorded; the outcome says how to settle it.
 *
 * @remarks
 * The {@link Dispatcher} settles an outcome on the broker (ack, nack with a retry time, dead letter),
 * the `ProjectionRunner` in its lane (retry in place, checkpoint, poison policy); both report the
 * settled outcome back ({@link HandlerPipeline.handled} and friends) so the lifecycle hooks fire
 * once it is final. Nothing here knows who delivered the message.
 */
export class HandlerPipeline {
  readonly #o: HandlerPipelineOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #maxBytes: number;
  /** Decode, signature, route and attempt limit: whether a message gets an attempt. */
  readonly #admission: MessageAdmission<PipelineOutcome | Promise<PipelineOutcome>>;
  /** Middleware and the handler, bounded by its time-out. */
  readonly #call: HandlerCall;
  readonly #contexts: HandlerContextFactory;
  /** Tells hooks and telemetry how runs went. */
  readonly #reporter: OutcomeReporter;
  /** Tells the hooks and telemetry of pauses and resumptions (what an `OutageBreaker` reports). */
  readonly outageListener: OutageListener;

  /**
   * @throws HarrierError `invalid-option` for a bad `retry`, `handlerTimeoutMs` or a handler's
   * `timeoutMs`.
   */
  constructor(options: HandlerPipelineOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? consoleLogger;
    this.#call = new HandlerCall(options, this.#clock, this.#logger);
    this.#reporter = new OutcomeReporter(options, this.#clock, this.#logger);
    this.outageListener = this.#reporter.outageListener;
    this.#maxBytes = options.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
    this.#contexts = new HandlerContextFactory(options, this.#clock, this.#maxBytes);
    this.#admission = new MessageAdmission(
      options,
      this.#maxBytes,
      this.#reporter,
      (entry, definition, envelope, policy, input) =>
        this.#attempt(entry, definition, envelope, policy, input),
    );
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

  /** Runs an admitted message's attempt, observed by telemetry when there is telemetry. */
  #attempt(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
  ): PipelineOutcome | Promise<PipelineOutcome> {
    if (this.#o.telemetry === undefined) {
      return this.#attemptEager(entry, definition, envelope, policy, input);
    }
    const observation = this.#reporter.observe({
      envelope,
      handler: entry.name,
      handlerKind: entry.kind,
      endpoint: this.#o.endpoint,
      attempt: input.facts.attempt,
      inProcess: false,
      ...(input.position !== undefined ? { position: input.position } : {}),
    });
    if (observation === undefined) return this.#attemptEager(entry, definition, envelope, policy, input);
    return this.#reporter.observed(
      observation,
      () => Promise.resolve(this.#attemptEager(entry, definition, envelope, policy, input, observation)),
      (outcome) => processEnd(outcome, this.#clock.now()),
    );
  }

  /** Runs the handler through its kind's step runner (a saga's) and decides the message's outcome. */
  async #attemptSteps(
    runner: StepRunner,
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
    observation: ProcessObservation | undefined,
  ): Promise<PipelineOutcome> {
    const { facts } = input;
    const startedAt = this.#clock.now();
    let outgoing: readonly OutgoingMessage[];
    try {
      const result = await runner(this.#step(entry, definition, envelope, facts.attempt, input, observation));
      if (result.kind === 'dead-letter') {
        return refused(entry.name, result.reason, result.error, definition.ordered, envelope);
      }
      outgoing = result.outgoing;
    } catch (error) {
      return this.#failed(entry, definition, envelope, policy, input, error);
    }
    return handledOutcome(entry, envelope, facts.attempt, startedAt, outgoing);
  }

  /** Runs the handler inside the unit of work and decides the message's outcome. */
  async #attemptInUnit(
    unit: TransactionalUnitOfWork,
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
  ): Promise<PipelineOutcome> {
    const { facts } = input;
    const startedAt = this.#clock.now();
    let outgoing: readonly OutgoingMessage[];
    try {
      const context = this.#contexts.received(envelope, facts.attempt, entry, input.signal);
      const result = await unit.run({
        context,
        handler: entry.name,
        handlerKind: entry.kind,
        endpoint: this.#o.endpoint,
        inProcess: false,
        ...(input.position !== undefined ? { position: input.position } : {}),
        run: () =>
          this.#call.invokeBounded(entry, definition, context, envelope.type, envelope.payload, false, input),
        abandoned: () => input.abandoned?.() === true,
      });
      // A unit that answered 'ran' has committed (its inbox row too): publish even if a stop
      // released the delivery meanwhile, or the messages are lost.
      if (result === 'ran') outgoing = await commitRecorded(this.#o.publisher, context);
      else if (result === 'stored') outgoing = context.recorded.map((p) => p.outgoing);
      else outgoing = [];
    } catch (error) {
      return this.#failed(entry, definition, envelope, policy, input, error);
    }
    return handledOutcome(entry, envelope, facts.attempt, startedAt, outgoing);
  }

  /**
   * Runs the handler (through its step runner or unit of work when there is one) and decides the
   * message's outcome: with neither, without a promise when the handler returns a plain value and
   * records nothing (the outcome is known in this turn).
   */
  #attemptEager(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
    observation?: ProcessObservation,
  ): PipelineOutcome | Promise<PipelineOutcome> {
    const runner = this.#o.steps?.[entry.kind];
    if (runner !== undefined) {
      return this.#attemptSteps(runner, entry, definition, envelope, policy, input, observation);
    }
    const unit = this.#o.unitOfWork;
    if (unit !== undefined) return this.#attemptInUnit(unit, entry, definition, envelope, policy, input);
    const { facts } = input;
    const startedAt = this.#clock.now();
    const context = this.#contexts.received(envelope, facts.attempt, entry, input.signal);
    let result: unknown;
    let thenable: boolean;
    try {
      result = this.#call.invoke(entry, definition, context, envelope.type, envelope.payload, false);
      // Inside the try: reading `then` of what the handler returned may throw, a failure of the
      // handler (as `await` would reject with it), never of the dispatcher.
      thenable = isThenable(result);
    } catch (error) {
      return this.#failed(entry, definition, envelope, policy, input, error);
    }
    if (thenable || context.recorded.length > 0) {
      // Only a promise needs a deadline: a plain value has returned already (no timer for it).
      const settled = thenable
        ? this.#call.bounded(result as PromiseLike<unknown>, entry, context, input)
        : result;
      return this.#attemptAfter(entry, definition, envelope, policy, input, context, startedAt, settled);
    }
    // Nothing is committed, so a released delivery can drop the call.
    if (input.abandoned?.() === true) return ABANDONED;
    return handledOutcome(entry, envelope, facts.attempt, startedAt, NO_OUTGOING);
  }

  /** The rest of {@link HandlerPipeline.#attemptEager} once the handler returned a promise or recorded. */
  async #attemptAfter(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
    context: HandlerContext,
    startedAt: number,
    result: unknown,
  ): Promise<PipelineOutcome> {
    let outgoing: readonly OutgoingMessage[];
    try {
      await result;
      if (input.abandoned?.() === true) return ABANDONED;
      outgoing =
        context.recorded.length === 0 ? NO_OUTGOING : await commitRecorded(this.#o.publisher, context);
    } catch (error) {
      return this.#failed(entry, definition, envelope, policy, input, error);
    }
    return handledOutcome(entry, envelope, input.facts.attempt, startedAt, outgoing);
  }

  /** The outcome of an attempt whose handler (or commit) failed: a retry, or a dead letter. */
  #failed(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
    error: unknown,
  ): PipelineOutcome {
    const { facts } = input;
    if (input.abandoned?.() === true) return ABANDONED;
    const errorInfo = toErrorInfo(error);
    const permanent = isPermanent(policy, error);
    if (!permanent && isTransientFailure(error, this.#o.isTransient)) {
      this.#logger.warn('Handler met an outage of a dependency; the attempt is not counted', {
        handler: entry.name,
        type: envelope.type,
        messageId: envelope.id,
        attempt: facts.attempt,
        error: errorInfo.message,
      });
      return {
        kind: 'paused',
        envelope,
        handler: entry.name,
        attempt: facts.attempt,
        error,
        errorInfo,
        failure: () =>
          this.#messageFailure(entry, definition, envelope, policy, facts, error, errorInfo, false),
      };
    }
    return this.#messageFailure(entry, definition, envelope, policy, facts, error, errorInfo, permanent);
  }

  /** The outcome of an attempt that failed on its own: a retry while attempts remain, else a dead letter. */
  #messageFailure(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    facts: DeliveryFacts,
    error: unknown,
    errorInfo: ErrorInfo,
    permanent: boolean,
  ): RetryOutcome | DeadLetterOutcome {
    if (!permanent && facts.attempt < policy.attempts) {
      const retryAt = this.#clock.now() + backoffDelay(policy, facts.attempt, this.#o.random);
      this.#logger.warn('Handler failed; will retry', {
        handler: entry.name,
        type: envelope.type,
        messageId: envelope.id,
        attempt: facts.attempt,
        retryAt,
        error: errorInfo.message,
      });
      return {
        kind: 'retry',
        envelope,
        handler: entry.name,
        attempt: facts.attempt,
        retryAt,
        error,
        errorInfo,
      };
    }
    return refused(entry.name, failureReason(entry.kind), errorInfo, definition.ordered, envelope, error);
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
    let context: LocalHandlerContext;
    try {
      context = this.#contexts.local(entry, definition, payload, now, options, signal);
    } catch (error) {
      // The definition's partition key function threw: a rejection, as from prepareEnvelope before.
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    // Without telemetry there is nothing to observe: no closure, no guard. The context makes the
    // call's own signal (the one given is the bus's) and is told of a time-out.
    if (this.#o.telemetry === undefined) return this.#runLocal(entry, definition, context, payload, context);
    return this.#runLocalObserved(entry, definition, context, payload, context);
  }

  #runLocalObserved(
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: HandlerContext,
    payload: unknown,
    call: CallTarget,
  ): Promise<unknown> {
    if (this.#o.telemetry === undefined) return this.#runLocal(entry, definition, context, payload, call);
    const observation = this.#reporter.observe({
      envelope: context.envelope,
      handler: entry.name,
      handlerKind: entry.kind,
      endpoint: this.#o.endpoint,
      attempt: 1,
      inProcess: true,
    });
    if (observation === undefined) return this.#runLocal(entry, definition, context, payload, call);
    return this.#reporter.observed(
      observation,
      () => this.#runLocal(entry, definition, context, payload, call),
      () => HANDLED_END,
    );
  }

  /**
   * Not async: a handler that returns a plain value and records nothing costs one resolved promise
   * (the caller's), none for the invoker and none for this function.
   */
  #runLocal(
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: HandlerContext,
    payload: unknown,
    call: CallTarget,
  ): Promise<unknown> {
    const unit = this.#o.unitOfWork;
    if (unit !== undefined) return this.#runLocalInUnit(unit, entry, definition, context, payload, call);
    let result: unknown;
    try {
      result = this.#call.invoke(entry, definition, context, definition.type, payload, true);
      // Inside the try: reading `then` of the result may throw, which `execute` rejects with.
      if (isThenable(result))
        return this.#commitAfter(context, this.#call.bounded(result, entry, context, call));
    } catch (error) {
      call.endCall?.();
      // What was thrown is passed on as it is, as an async function would (Error or not).
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    call.endCall?.();
    // Committed only when there is something to publish: most calls record nothing.
    if (context.recorded.length > 0) return this.#commitAfter(context, result);
    // A void handler's calls all resolve alike, so they share one promise (none made per call).
    return result === undefined ? RESOLVED_VOID : Promise.resolve(result);
  }

  /** Waits for the handler's result, then commits what it recorded; resolves to the result. */
  async #commitAfter(context: HandlerContext, result: unknown): Promise<unknown> {
    const value = await result;
    if (context.recorded.length > 0) await commitRecorded(this.#o.publisher, context);
    return value;
  }

  async #runLocalInUnit(
    unit: TransactionalUnitOfWork,
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: HandlerContext,
    payload: unknown,
    call: CallTarget,
  ): Promise<unknown> {
    let result: unknown;
    let ended: UnitOfWorkResult;
    try {
      ended = await unit.run({
        context,
        handler: entry.name,
        handlerKind: entry.kind,
        endpoint: this.#o.endpoint,
        inProcess: true,
        run: async () =>
          (result = await this.#call.invokeBounded(
            entry,
            definition,
            context,
            definition.type,
            payload,
            true,
            call,
          )),
        abandoned: () => false,
      });
    } finally {
      call.endCall?.();
    }
    if (ended === 'ran') await commitRecorded(this.#o.publisher, context);
    return result;
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

  #step(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    attempt: number,
    input: PipelineInput,
    observation: ProcessObservation | undefined,
  ): PipelineStep {
    return {
      entry,
      definition,
      envelope,
      attempt,
      endpoint: this.#o.endpoint,
      signal: input.signal,
      env: this.#contexts.env(entry.kind),
      invoke: (context) =>
        this.#call.invokeBounded(entry, definition, context, envelope.type, envelope.payload, false, input),
      publish: async (messages) => {
        // A stop released the delivery meanwhile: publish nothing (the redelivery will).
        if (input.abandoned?.() === true) throw new HarrierError('stopping', 'The delivery was released');
        await publishRecorded(this.#o.publisher, entry.name, messages);
      },
      sagaInstance: (instance) => {
        if (observation?.sagaInstance !== undefined) {
          this.#reporter.guard('sagaInstance', () => observation.sagaInstance?.(instance));
        }
      },
    };
  }
}
