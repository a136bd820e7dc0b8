import { HarrierError } from '../errors/harrier-error.js';

/** The shortest delay queue, in ms: a shorter wait is rounded up to it. */
export const MIN_DELAY_BUCKET_MS = 2 ** 6;

/** The latest time a JavaScript `Date` holds, in ms since the epoch (about the year 275760). */
export const LATEST_TIME_MS = 8.64e15;

/**
 * The delay queue a wait of `remainingMs` goes into: the longest power of two of ms not past it,
 * from {@link MIN_DELAY_BUCKET_MS} to `maxBucketMs` (a longer wait goes through that one several
 * times, a shorter one ends up to 64 ms late).
 */
export function bucketFor(remainingMs: number, maxBucketMs: number): number {
  let bucket = MIN_DELAY_BUCKET_MS;
  while (bucket * 2 <= remainingMs && bucket * 2 <= maxBucketMs) bucket *= 2;
  return bucket;
}

/**
 * The time a message published with `deliverAt` waits for, in whole ms (rounded up: never before
 * its time); undefined when there is none or it has come.
 *
 * @throws HarrierError `invalid-option` when `deliverAt` is not a number, or later than any `Date`
 *   (a wait of some 270,000 years is a mistake, and would go round the delay queues for ever).
 */
export function notBeforeOf(deliverAt: number | undefined, now: number): number | undefined {
  if (deliverAt === undefined) return undefined;
  if (typeof deliverAt !== 'number' || Number.isNaN(deliverAt) || deliverAt > LATEST_TIME_MS) {
    throw new HarrierError(
      'invalid-option',
      `A message's deliverAt is ${String(deliverAt)}: use a time in ms since the epoch a Date can hold (at most ${String(LATEST_TIME_MS)}), e.g. Date.now() + 60_000`,
    );
  }
  return deliverAt > now ? Math.ceil(deliverAt) : undefined;
}

/**
 * Whether a `x-harrier-not-before` read from a message is a time: finite and within the range of a
 * `Date`. Anything else (NaN, `1e300` in a foreign message's header) is malformed: the message is
 * delivered at once rather than sent round the delay queues for ever.
 */
export function isNotBeforeTime(value: number): boolean {
  return Number.isFinite(value) && Math.abs(value) <= LATEST_TIME_MS;
}
