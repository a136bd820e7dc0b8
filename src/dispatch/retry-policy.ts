import { HarrierError } from '../errors/harrier-error.js';
import type { RetryOptions } from '../messages/definition.js';

/** A retry policy with every default filled in. */
export interface RetryPolicy {
  readonly attempts: number;
  /** Retries made at once (no delay) before the delayed ones. */
  readonly immediate: number;
  readonly baseMs: number;
  readonly maxMs: number;
  readonly jitter: number;
  readonly permanent: (error: unknown) => boolean;
}

/**
 * Harrier's default retry policy: 8 attempts; after the first failure 2 immediate retries, then 5
 * delayed ones of 2.5 s doubling (2.5, 5, 10, 20, 40 s: about 77 s, at least 62 s with the 0.2
 * jitter) before a message failure dead-letters.
 *
 * @remarks
 * Immediate retries absorb what a second try fixes (a lost race, a deadlock victim); the delayed ones
 * outlast what a dependency's hiccup or a deploy takes, so a message is not dead-lettered for a
 * minute's trouble. An outage of a dependency spends none of these (see `isTransientFailure`).
 */
export const DEFAULT_RETRY: RetryPolicy = {
  attempts: 8,
  immediate: 2,
  baseMs: 2_500,
  maxMs: 60_000,
  jitter: 0.2,
  permanent: () => false,
};

/**
 * Merges retry options, most specific first (handler, then definition, then bus).
 * @throws HarrierError `invalid-option` when a value is out of range.
 */
export function resolveRetryPolicy(...layers: readonly (RetryOptions | undefined)[]): RetryPolicy {
  const pick = <K extends keyof RetryOptions>(key: K): RetryOptions[K] | undefined =>
    layers.find((l) => l?.[key] !== undefined)?.[key];
  const backoff = <K extends 'baseMs' | 'maxMs' | 'jitter'>(key: K): number | undefined =>
    layers.find((l) => l?.backoff?.[key] !== undefined)?.backoff?.[key];
  const policy: RetryPolicy = {
    attempts: pick('attempts') ?? DEFAULT_RETRY.attempts,
    immediate: pick('immediate') ?? DEFAULT_RETRY.immediate,
    baseMs: backoff('baseMs') ?? DEFAULT_RETRY.baseMs,
    maxMs: backoff('maxMs') ?? DEFAULT_RETRY.maxMs,
    jitter: backoff('jitter') ?? DEFAULT_RETRY.jitter,
    permanent: pick('permanent') ?? DEFAULT_RETRY.permanent,
  };
  if (!Number.isInteger(policy.attempts) || policy.attempts < 1) {
    throw new HarrierError(
      'invalid-option',
      `retry.attempts is ${policy.attempts}: use a whole number of at least 1 (1 means no retry)`,
    );
  }
  if (!Number.isInteger(policy.immediate) || policy.immediate < 0) {
    throw new HarrierError(
      'invalid-option',
      `retry.immediate is ${policy.immediate}: use a whole number of at least 0 (0 means every retry waits its backoff)`,
    );
  }
  if (!(policy.baseMs >= 0) || !(policy.maxMs >= policy.baseMs)) {
    throw new HarrierError(
      'invalid-option',
      `retry.backoff is { baseMs: ${policy.baseMs}, maxMs: ${policy.maxMs} }: use 0 <= baseMs <= maxMs`,
    );
  }
  if (!(policy.jitter >= 0 && policy.jitter <= 1)) {
    throw new HarrierError(
      'invalid-option',
      `retry.backoff.jitter is ${policy.jitter}: use a fraction from 0 to 1`,
    );
  }
  return policy;
}

/**
 * The delay before the attempt after `failedAttempt`: none for the first `immediate` failures, then
 * `baseMs * 2^(n-1)` for the n-th delayed retry, capped at `maxMs`, spread by +/- `jitter`.
 */
export function backoffDelay(
  policy: RetryPolicy,
  failedAttempt: number,
  random: () => number = Math.random,
): number {
  const delayed = failedAttempt - policy.immediate;
  if (delayed <= 0) return 0;
  const exponential = Math.min(policy.maxMs, policy.baseMs * 2 ** (delayed - 1));
  const spread = exponential * policy.jitter * (2 * random() - 1);
  return Math.max(0, Math.round(Math.min(policy.maxMs, exponential + spread)));
}

/**
 * True when retrying cannot help: an `UnrecoverableError`, a `projection-publish` refusal (a
 * programming error that fails the same way every time), or what the policy calls permanent.
 */
export function isPermanent(policy: RetryPolicy, error: unknown): boolean {
  // An UnrecoverableError carries 'unrecoverable' (HarrierError.is also matches one from another copy).
  if (HarrierError.is(error, 'unrecoverable') || HarrierError.is(error, 'projection-publish')) return true;
  try {
    return policy.permanent(error);
  } catch {
    return false;
  }
}
