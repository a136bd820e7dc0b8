import type { z } from 'zod';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerClass } from '../handlers/handler-metadata.js';
import type { MessageContext } from '../handlers/message-context.js';
import type { RetryOptions, Upcasters } from '../messages/definition.js';

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
   * The version of the state shape. Raise it when the schema changes in a way stored states of the
   * old shape would fail, and give an {@link SagaOptions.upcast} step from each older version: a
   * stored state is raised step by step to this version, then parsed by `state`, and saved with it.
   *
   * @remarks
   * A stored state of a newer version than this (saved by newer code during a rolling deploy) is
   * never parsed nor overwritten here: its message goes back, spending no attempt, to wait for a
   * worker that knows the version, and is dead-lettered as `version-unsupported` once the state has
   * waited 24 hours. See docs/sagas.md.
   * @defaultValue 1
   */
  readonly version?: number;
  /**
   * How a stored state of an older version is raised to this one: one step per older version,
   * built with `upcasters<StateV1>()`; the last step returns the schema's input. A step that throws
   * dead-letters the message (the state stays as it was).
   * @defaultValue none (required when `version` is above 1)
   */
  readonly upcast?: Upcasters<z.input<S>>;
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
  /**
   * How long one step (the method's call) may run, in ms, before its attempt fails with HarrierError
   * `handler-timeout` (retried by the retry policy, dead-lettered after the last attempt); the
   * instance is not saved. Above 0 and at most 2147483647. See docs/handlers.md.
   * @defaultValue the bus's `handlerTimeoutMs` (300000, 5 minutes)
   */
  readonly timeoutMs?: number;
  /**
   * How many of its latest steps an instance remembers (the handled message id and the messages the
   * step recorded, bodies included), so that a redelivery of one of those messages publishes the
   * same messages again instead of running the step twice.
   *
   * @remarks
   * A step stays remembered while it is among the latest `keepApplied` steps of its instance OR
   * was saved less than `keepAppliedMs` ago, within a budget of {@link SAGA_APPLIED_MAX_BYTES} of
   * JSON per instance (beyond it the oldest steps go, even young ones, with a warning). A message
   * redelivered after it was forgotten runs again (a timeout, or a message for a completed
   * instance, is dropped). Raise it for a saga whose instances take bursts of messages; lower it
   * for one whose steps record large messages (every save writes them all).
   * @defaultValue 64 ({@link SAGA_APPLIED_KEPT})
   */
  readonly keepApplied?: number;
  /**
   * How long, in ms after its save, a step stays remembered whatever `keepApplied` says: cover the
   * longest time a delivery can be retried or redelivered after its step saved.
   *
   * @remarks
   * The default of an hour covers Harrier's default retry policy (8 attempts over about 77 s) and a
   * stalled delivery's redelivery many times over; raise it for a saga whose retry policy spans
   * longer.
   * @defaultValue 3600000, an hour ({@link SAGA_APPLIED_RETENTION_MS})
   */
  readonly keepAppliedMs?: number;
  /**
   * Tries of a step that keeps losing the compare-and-set to concurrent steps of its instance in
   * other processes (each try on fresh state) before its delivery is retried as a failure.
   * @defaultValue 10 ({@link SAGA_CONFLICT_TRIES})
   */
  readonly conflictTries?: number;
}

/** Default of {@link SagaOptions.keepApplied}: the steps an instance remembers. */
export const SAGA_APPLIED_KEPT = 64;

/** Default of {@link SagaOptions.keepAppliedMs}: an hour. */
export const SAGA_APPLIED_RETENTION_MS = 60 * 60 * 1000;

/**
 * Most bytes of applied-step JSON an instance keeps (1 MiB): beyond it the oldest steps are
 * forgotten even when `keepApplied` or `keepAppliedMs` would keep them, so a busy instance's saves
 * stay bounded.
 */
export const SAGA_APPLIED_MAX_BYTES = 1024 * 1024;

/** Default of {@link SagaOptions.conflictTries}. */
export const SAGA_CONFLICT_TRIES = 10;

/** The checked `keepApplied`, `keepAppliedMs` and `conflictTries` of a saga. */
export interface SagaLimits {
  readonly keepApplied: number;
  readonly keepAppliedMs: number;
  readonly conflictTries: number;
}

/**
 * A saga's `keepApplied`, `keepAppliedMs` and `conflictTries`, or their defaults.
 *
 * @throws HarrierError `invalid-option` when one is not a whole number of at least 1.
 */
export function sagaLimitsOf(name: string, options: SagaOptions): SagaLimits {
  const limits = {
    keepApplied: options.keepApplied ?? SAGA_APPLIED_KEPT,
    keepAppliedMs: options.keepAppliedMs ?? SAGA_APPLIED_RETENTION_MS,
    conflictTries: options.conflictTries ?? SAGA_CONFLICT_TRIES,
  };
  const fixes = {
    keepApplied: `pass e.g. ${SAGA_APPLIED_KEPT} (the default) to remember that many steps for redeliveries`,
    keepAppliedMs: `pass e.g. ${SAGA_APPLIED_RETENTION_MS} (the default, an hour) to remember steps that long for redeliveries`,
    conflictTries: `pass e.g. ${SAGA_CONFLICT_TRIES} (the default), or 1 to retry the delivery at the first conflict`,
  };
  for (const option of ['keepApplied', 'keepAppliedMs', 'conflictTries'] as const) {
    const value: unknown = limits[option];
    if (!Number.isSafeInteger(value) || (value as number) < 1) {
      throw new HarrierError(
        'invalid-option',
        `@Saga('${name}') ${option} must be a whole number of at least 1, got ${String(value)}: ${fixes[option]}, or leave it out`,
      );
    }
  }
  return limits;
}

/** The checked `version` and `upcast` of a saga. */
export interface SagaStateVersion {
  /** The version of the state shape the saga's code parses and saves. */
  readonly version: number;
  /**
   * Raises a stored state from version `from` (1 to `version`) to `version`, step by step.
   * @throws whatever an upcast step throws.
   */
  readonly upcast: (state: unknown, from: number) => unknown;
}

/**
 * A saga's state `version` and the function that raises an older stored state to it.
 *
 * @throws HarrierError `invalid-option` when `version` is not a whole number of at least 1, or
 * `upcast` does not hold one step per older version.
 */
export function sagaStateVersionOf(name: string, options: SagaOptions): SagaStateVersion {
  const version: unknown = options.version ?? 1;
  if (!Number.isSafeInteger(version) || (version as number) < 1) {
    throw new HarrierError(
      'invalid-option',
      `@Saga('${name}') version must be a whole number of at least 1, got ${String(version)}: use 1 (the default) for a state shape that never changed, and raise it by one with each change`,
    );
  }
  const current = version as number;
  const steps: unknown = options.upcast?.steps ?? [];
  if (
    !Array.isArray(steps) ||
    steps.length !== current - 1 ||
    !steps.every((step) => typeof step === 'function')
  ) {
    throw new HarrierError(
      'invalid-option',
      `@Saga('${name}') is version ${current} with ${Array.isArray(steps) ? steps.length : 0} upcast steps: give one step per older version (${current - 1}), e.g. upcast: upcasters<StateV1>()${Array.from({ length: current - 1 }, (_, i) => `.step((v${i + 1}) => v${i + 2})`).join('')}`,
    );
  }
  const raise = steps as readonly ((state: unknown) => unknown)[];
  return {
    version: current,
    upcast: (state, from) => {
      let value = state;
      for (let at = Math.max(from, 1) - 1; at < current - 1; at++)
        value = (raise[at] as (s: unknown) => unknown)(value);
      return value;
    },
  };
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
