import { HarrierError } from '../errors/harrier-error.js';
import type { RetryOptions } from '../messages/definition.js';

/** A retry policy with every default filled in. */
export interface RetryPolicy {
  readonly attempts: number;
  readonly baseMs: number;
  readonly maxMs: number;
  readonly jitter: number;
  readonly permanent: (error: unknown) => boolean;
}

/** Harrier's default retry policy: 5 attempts, 200 ms base, 60 s cap, 0.2 jitter. */
export const DEFAULT_RETRY: RetryPolicy = {
  attempts: 5,
  baseMs: 200,
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
 * The delay before the attempt after `failedAttempt`: `baseMs * 2^(failedAttempt-1)`, capped at
 * `maxMs`, spread by +/- `jitter`.
 */
export function backoffDelay(
  policy: RetryPolicy,
  failedAttempt: number,
  random: () => number = Math.random,
): number {
  const exponential = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, failedAttempt - 1));
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
