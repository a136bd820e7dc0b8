import {
  toErrorInfo,
  type DeliveryFacts,
  type ErrorInfo,
  type OutgoingMessage,
} from '../broker/message-broker.js';
import type { Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import type { Logger } from '../logging/logger.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import { commitRecorded, publishRecorded } from './commit-recorded.js';
import { isThenable, type HandlerCall } from './handler-call.js';
import type { HandlerContext } from './handler-context.js';
import type { HandlerContextFactory } from './handler-context-factory.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import type { ProcessObservation } from './message-telemetry.js';
import { processEnd, type OutcomeReporter } from './outcome-reporter.js';
import type { PipelineInput } from './pipeline-input.js';
import {
  ABANDONED,
  NO_OUTGOING,
  failureReason,
  handledOutcome,
  refused,
  type DeadLetterOutcome,
  type PipelineOutcome,
  type RetryOutcome,
} from './pipeline-outcome.js';
import { backoffDelay, isPermanent, type RetryPolicy } from './retry-policy.js';
import type { PipelineStep, StepRunner } from './step-runner.js';
import type { TransactionalUnitOfWork } from './transactional-unit-of-work.js';
import { isTransientFailure } from './transient-failure.js';

/**
 * Runs an admitted message's handler once and decides the outcome: handled, a retry, a pause for an
 * outage, or a dead letter once out of attempts.
 *
 * @remarks
 * Three strategies, by what is configured: a handler kind's step runner (a saga step loads and saves
 * its instance around the call), the unit of work (an outbox and inbox), or the eager path, a plain
 * call that answers without a promise when the handler returned a plain value and recorded nothing.
 */
export class HandlerAttempt {
  readonly #o: HandlerPipelineOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #call: HandlerCall;
  readonly #contexts: HandlerContextFactory;
  readonly #reporter: OutcomeReporter;

  constructor(
    options: HandlerPipelineOptions,
    clock: Clock,
    logger: Logger,
    call: HandlerCall,
    contexts: HandlerContextFactory,
    reporter: OutcomeReporter,
  ) {
    this.#o = options;
    this.#clock = clock;
    this.#logger = logger;
    this.#call = call;
    this.#contexts = contexts;
    this.#reporter = reporter;
  }

  /**
   * Runs an admitted message's handler once, observed by telemetry when there is telemetry, and
   * decides the outcome; answers it without a promise on the eager path (see
   * {@link HandlerAttempt.#eager}). A throw of a bug here is the caller's to catch.
   */
  run(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
  ): PipelineOutcome | Promise<PipelineOutcome> {
    if (this.#o.telemetry === undefined) {
      return this.#attempt(entry, definition, envelope, policy, input);
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
    if (observation === undefined) return this.#attempt(entry, definition, envelope, policy, input);
    return this.#reporter.observed(
      observation,
      () => Promise.resolve(this.#attempt(entry, definition, envelope, policy, input, observation)),
      (outcome) => processEnd(outcome, this.#clock.now()),
    );
  }

  /**
   * Runs the handler the way its kind and the options ask: through its kind's step runner, inside the
   * unit of work, or else on the eager path.
   */
  #attempt(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
    observation?: ProcessObservation,
  ): PipelineOutcome | Promise<PipelineOutcome> {
    const runner = this.#o.steps?.[entry.kind];
    if (runner !== undefined) {
      return this.#withStepRunner(runner, entry, definition, envelope, policy, input, observation);
    }
    const unit = this.#o.unitOfWork;
    if (unit !== undefined) return this.#inUnitOfWork(unit, entry, definition, envelope, policy, input);
    return this.#eager(entry, definition, envelope, policy, input);
  }

  /**
   * The fast eager path: a plain call of middleware and the handler that answers the outcome in this
   * turn, with no promise made and none awaited, when the handler returns a plain value and records
   * nothing; otherwise it goes on in {@link HandlerAttempt.#eagerAfter}.
   *
   * @remarks
   * The dispatcher then acks in the same turn (see the Redis section of docs/benchmarks.md).
   */
  #eager(
    entry: HandlerEntry,
    definition: MessageDefinition,
    envelope: Envelope,
    policy: RetryPolicy,
    input: PipelineInput,
  ): PipelineOutcome | Promise<PipelineOutcome> {
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
      return this.#eagerAfter(entry, definition, envelope, policy, input, context, startedAt, settled);
    }
    // Nothing is committed, so a released delivery can drop the call.
    if (input.abandoned?.() === true) return ABANDONED;
    return handledOutcome(entry, envelope, facts.attempt, startedAt, NO_OUTGOING);
  }

  /** The rest of the eager path once the handler returned a promise or recorded messages. */
  async #eagerAfter(
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

  /** Runs the handler through its kind's step runner (a saga's) and decides the message's outcome. */
  async #withStepRunner(
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
      if (result.kind === 'release') {
        // The message is not at fault: back without spending an attempt.
        return {
          kind: 'retry',
          envelope,
          handler: entry.name,
          attempt: facts.attempt,
          retryAt: result.retryAt,
          error: result.error,
          errorInfo: toErrorInfo(result.error),
          uncounted: true,
        };
      }
      outgoing = result.outgoing;
    } catch (error) {
      return this.#failed(entry, definition, envelope, policy, input, error);
    }
    return handledOutcome(entry, envelope, facts.attempt, startedAt, outgoing);
  }

  /** Runs the handler inside the unit of work and decides the message's outcome. */
  async #inUnitOfWork(
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
      // The unit rolled back: the projection was rebuilt since its lane started, so the call's result
      // no longer matters (the runner restarts the projection from its new checkpoints).
      if (HarrierError.is(error, 'projection-rebuilt')) return ABANDONED;
      return this.#failed(entry, definition, envelope, policy, input, error);
    }
    return handledOutcome(entry, envelope, facts.attempt, startedAt, outgoing);
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

  /** What a step runner gets for one handler call: the call, the commit, telemetry's saga hook. */
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
      abandoned: () => input.abandoned?.() === true,
      publish: async (messages, options) => {
        // A stop released the delivery meanwhile: publish nothing (the redelivery will), unless the
        // step's transaction committed (its inbox row may make the redelivery skip the step).
        if (options?.committed !== true && input.abandoned?.() === true) {
          throw new HarrierError('stopping', 'The delivery was released');
        }
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
