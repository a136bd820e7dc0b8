import type { z } from 'zod';
import { assertLegacyDecorator } from '../handlers/decorators.js';
import { setHandlerMetadata, type HandlerClass } from '../handlers/handler-metadata.js';
import { checkTimeoutMs } from '../handlers/handler-timeout.js';
import type { CommandDefinition, EventDefinition, PayloadOf } from '../messages/definition.js';
import {
  addPendingSagaStep,
  sagaLimitsOf,
  sagaStateVersionOf,
  setSagaMetadata,
  takePendingSagaSteps,
  type SagaCorrelation,
  type SagaOptions,
} from './saga-metadata.js';

/** Options of `@StartedBy`: how a message finds its saga instance. */
export interface StartedByOptions<P> {
  /** A payload field holding the saga id, or a function of the payload and context that returns it. */
  readonly correlate: SagaCorrelation<P>;
}

/** Options of `@Handles`. */
export interface HandlesOptions<P> {
  /**
   * A payload field holding the saga id, or a function of the payload and context that returns it.
   * @defaultValue none: only for a timeout requested with `ctx.requestTimeout` (it carries its saga id)
   */
  readonly correlate?: SagaCorrelation<P>;
}

/**
 * The property descriptor of a saga step method: it takes payloads of type `P` (and a
 * {@link SagaContext} of the saga's state).
 */
export interface SagaStepDescriptor<P> {
  value?: (payload: P, context: never) => unknown;
}

/**
 * Marks a class as a saga: a long-running process whose state is stored per instance, fed by its
 * `@StartedBy` and `@Handles` methods, each called with the payload and a `SagaContext`.
 *
 * @param name - the saga's stable name: its subscription, store key and part of its outgoing ids.
 * @remarks
 * List the class in `createBus({ sagas: [...] })`; it is resolved from the bus's container like a
 * handler, one instance per step. Give the state a `version` and `upcast` steps when its shape
 * changes, so instances stored with an older shape are raised on load (see docs/sagas.md).
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 * @throws HarrierError `invalid-option` when `keepApplied`, `keepAppliedMs` or `conflictTries` is not a whole number
 * of at least 1, `timeoutMs` is not above 0 and at most 2147483647, `version` is not a whole number of
 * at least 1, or `upcast` does not hold one step per older version.
 * @example
 * ```ts
 * @Saga('orders.Fulfilment', { state: z.object({ paid: z.boolean().default(false) }) })
 * class Fulfilment {
 *   @StartedBy(OrderPlaced, { correlate: 'orderId' })
 *   placed(payload: PayloadOf<typeof OrderPlaced>, ctx: SagaContext<State>) { ... }
 * }
 * ```
 */
export function Saga<S extends z.ZodType>(
  name: string,
  options: SagaOptions<S>,
): (target: HandlerClass) => void {
  sagaLimitsOf(name, options);
  sagaStateVersionOf(name, options);
  if (options.timeoutMs !== undefined) checkTimeoutMs(options.timeoutMs, `@Saga('${name}') timeoutMs`);
  return (target: HandlerClass, ...rest: unknown[]): void => {
    assertLegacyDecorator('@Saga', rest[0]);
    const steps = takePendingSagaSteps(target.prototype as object);
    setSagaMetadata(target, { name, target, options, steps });
    setHandlerMetadata(target, {
      kind: 'saga',
      target,
      name,
      routes: steps.map((step) => ({ definition: step.definition, method: step.method })),
      options: {
        name,
        ...(options.retry !== undefined ? { retry: options.retry } : {}),
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      },
    });
  };
}

/**
 * Marks a method of a `@Saga` class as a step that starts an instance: it runs on the instance the
 * correlation names, created with the saga's initial state when it does not exist yet.
 *
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 */
export function StartedBy<D extends EventDefinition | CommandDefinition>(
  definition: D,
  options: StartedByOptions<PayloadOf<D>>,
): (target: object, method: string | symbol, descriptor: SagaStepDescriptor<PayloadOf<D>>) => void {
  return (target: object, method: unknown): void => {
    assertLegacyDecorator('@StartedBy', method);
    addPendingSagaStep(target, {
      definition,
      method: String(method),
      starts: true,
      correlate: options.correlate,
    });
  };
}

/**
 * Marks a method of a `@Saga` class as a step of an existing instance (a later message, or a
 * timeout it requested).
 *
 * @remarks
 * A message for an instance that does not exist follows the saga's `onMissing` rule; one for a
 * completed instance its `onCompleted` rule.
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 */
export function Handles<D extends EventDefinition | CommandDefinition>(
  definition: D,
  options: HandlesOptions<PayloadOf<D>> = {},
): (target: object, method: string | symbol, descriptor: SagaStepDescriptor<PayloadOf<D>>) => void {
  return (target: object, method: unknown): void => {
    assertLegacyDecorator('@Handles', method);
    addPendingSagaStep(target, {
      definition,
      method: String(method),
      starts: false,
      correlate: options.correlate,
    });
  };
}
