import type { z } from 'zod';
import type { HandlerClass } from '../handlers/handler-metadata.js';
import type { MessageContext } from '../handlers/message-context.js';
import type { RetryOptions } from '../messages/definition.js';

/** What to do with a message for a saga instance that does not exist or has completed. */
export type SagaMissingRule = 'ignore' | 'dead-letter';

/**
 * Maps a message to the id of the one saga instance it is for: the name of a payload field holding
 * the id, or a function of the payload and context.
 */
export type SagaCorrelation<P> = (keyof P & string) | ((payload: P, context: MessageContext<P>) => string);

/** Options of `@Saga`. */
export interface SagaOptions<S extends z.ZodType = z.ZodType> {
  /** The state schema: every saved state is parsed with it (and must be JSON). */
  readonly state: S;
  /**
   * The state of a new instance, before the step that starts it runs.
   * @defaultValue the schema's parse of `{}` (give defaults in the schema, or this)
   */
  readonly initial?: () => z.input<S>;
  /**
   * A message for an instance that does not exist and that does not start one: `ignore` acks it
   * with a log line, `dead-letter` dead-letters it as `saga-not-found`.
   * @defaultValue 'ignore'
   */
  readonly onMissing?: SagaMissingRule;
  /**
   * A message for an instance that has completed: `ignore` acks it with a log line, `dead-letter`
   * dead-letters it as `saga-completed`.
   * @defaultValue 'ignore'
   */
  readonly onCompleted?: SagaMissingRule;
  /**
   * Retry policy of the saga's steps (a delivery retried after a step failed).
   * @defaultValue the definition's, else the bus's
   */
  readonly retry?: RetryOptions;
}

/** One `@StartedBy` or `@Handles` method of a saga class. */
export interface SagaStepMetadata {
  readonly definition: unknown;
  readonly method: string;
  /** True for `@StartedBy`: the message creates the instance when it does not exist. */
  readonly starts: boolean;
  /**
   * The correlation; none for a timeout-only step (a timeout carries its saga id).
   */
  readonly correlate: SagaCorrelation<never> | undefined;
}

/** What `@Saga` records about a class. */
export interface SagaMetadata {
  readonly name: string;
  readonly target: HandlerClass;
  readonly options: SagaOptions;
  readonly steps: readonly SagaStepMetadata[];
}

const sagas = new WeakMap<object, SagaMetadata>();
const pendingSteps = new WeakMap<object, SagaStepMetadata[]>();

/** Records the metadata of a `@Saga` class. */
export function setSagaMetadata(target: HandlerClass, value: SagaMetadata): void {
  sagas.set(target, value);
}

/** The metadata of a `@Saga` class, if it is one. */
export function getSagaMetadata(target: unknown): SagaMetadata | undefined {
  return typeof target === 'function' ? sagas.get(target) : undefined;
}

/** Records a step method on a class's prototype, before `@Saga` collects them. */
export function addPendingSagaStep(prototype: object, step: SagaStepMetadata): void {
  const list = pendingSteps.get(prototype) ?? [];
  list.push(step);
  pendingSteps.set(prototype, list);
}

/** The step methods recorded on a class's prototype. */
export function takePendingSagaSteps(prototype: object): SagaStepMetadata[] {
  return pendingSteps.get(prototype) ?? [];
}
