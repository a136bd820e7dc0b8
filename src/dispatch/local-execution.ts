import type { HandlerEntry } from '../handlers/handler-registry.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { SendOptions } from '../messages/send-options.js';
import { commitRecorded } from './commit-recorded.js';
import { isThenable, type HandlerCall } from './handler-call.js';
import type { HandlerContext, LocalHandlerContext } from './handler-context.js';
import type { HandlerContextFactory } from './handler-context-factory.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import { HANDLED_END, type OutcomeReporter } from './outcome-reporter.js';
import type { TransactionalUnitOfWork, UnitOfWorkResult } from './transactional-unit-of-work.js';

/**
 * Runs a handler for a message `execute` made in this process: no decoding, verification or retries,
 * and what the handler throws reaches the caller.
 *
 * @remarks
 * A handler that returns a plain value and records nothing costs one resolved promise (shared by
 * every void call), none for the invoker and none for the call itself.
 */
export class LocalExecution {
  readonly #o: HandlerPipelineOptions;
  readonly #call: HandlerCall;
  readonly #contexts: HandlerContextFactory;
  readonly #reporter: OutcomeReporter;

  constructor(
    options: HandlerPipelineOptions,
    call: HandlerCall,
    contexts: HandlerContextFactory,
    reporter: OutcomeReporter,
  ) {
    this.#o = options;
    this.#call = call;
    this.#contexts = contexts;
    this.#reporter = reporter;
  }

  /**
   * Runs the handler of one `execute` call (see {@link HandlerPipeline.runChecked}): its context
   * builds the envelope only when the handler, a middleware, the unit of work or telemetry reads it.
   *
   * @param payload - the payload as its schema parsed it.
   * @param now - the clock time of the call (the envelope's time and its id's).
   * @param options - the caller's options (copied by the context, unless it is `NO_OPTIONS`).
   */
  run(
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
    if (this.#o.telemetry === undefined) return this.#execute(entry, definition, context, payload);
    return this.#observed(entry, definition, context, payload);
  }

  /** The call inside telemetry's observation of it (run unobserved when telemetry's hook threw). */
  #observed(
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: LocalHandlerContext,
    payload: unknown,
  ): Promise<unknown> {
    const observation = this.#reporter.observe({
      envelope: context.envelope,
      handler: entry.name,
      handlerKind: entry.kind,
      endpoint: this.#o.endpoint,
      attempt: 1,
      inProcess: true,
    });
    if (observation === undefined) return this.#execute(entry, definition, context, payload);
    return this.#reporter.observed(
      observation,
      () => this.#execute(entry, definition, context, payload),
      () => HANDLED_END,
    );
  }

  /**
   * Not async: a handler that returns a plain value and records nothing costs one resolved promise
   * (the caller's), none for the invoker and none for this function.
   */
  #execute(
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: LocalHandlerContext,
    payload: unknown,
  ): Promise<unknown> {
    const unit = this.#o.unitOfWork;
    if (unit !== undefined) return this.#inUnitOfWork(unit, entry, definition, context, payload);
    let result: unknown;
    try {
      result = this.#call.invoke(entry, definition, context, definition.type, payload, true);
      // Inside the try: reading `then` of the result may throw, which `execute` rejects with.
      if (isThenable(result)) {
        return this.#commitAfter(context, this.#call.bounded(result, entry, context, context));
      }
    } catch (error) {
      context.endCall();
      // What was thrown is passed on as it is, as an async function would (Error or not).
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    context.endCall();
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

  /** The call inside the unit of work, then the commit of what it recorded once the unit ran it. */
  async #inUnitOfWork(
    unit: TransactionalUnitOfWork,
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: LocalHandlerContext,
    payload: unknown,
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
            context,
          )),
        abandoned: () => false,
      });
    } finally {
      context.endCall();
    }
    if (ended === 'ran') await commitRecorded(this.#o.publisher, context);
    return result;
  }
}

/**
 * What `execute` of a void handler that recorded nothing returns: one fulfilled promise shared by
 * every such call (frozen, so no caller can hang properties on another's), which means two calls may
 * return the same promise object.
 */
const RESOLVED_VOID: Promise<unknown> = Object.freeze(Promise.resolve(undefined));
