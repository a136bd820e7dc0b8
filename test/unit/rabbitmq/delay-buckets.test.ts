import type { MessageProperties } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { HarrierError } from '../../../src/errors/harrier-error.js';
import {
  bucketFor,
  LATEST_TIME_MS,
  MIN_DELAY_BUCKET_MS,
  notBeforeOf,
} from '../../../src/rabbitmq/delay-buckets.js';
import { readFacts } from '../../../src/rabbitmq/message-headers.js';

const MAX = 2 ** 31;
const YEAR_MS = 365 * 86_400_000;

function notBeforeRead(value: unknown): { notBefore: number | undefined; dropped: readonly string[] } {
  const read = readFacts({ headers: { 'x-harrier-not-before': value } } as unknown as MessageProperties);
  return { notBefore: read.facts.notBefore, dropped: read.dropped };
}

describe('bucketFor', () => {
  it('takes the longest power of two of ms not past the wait', () => {
    expect(bucketFor(5_000, MAX)).toBe(4_096);
    expect(bucketFor(4_096, MAX)).toBe(4_096);
    expect(bucketFor(4_095, MAX)).toBe(2_048);
  });

  it('takes the shortest delay queue for a wait shorter than it, or none left', () => {
    expect(bucketFor(10, MAX)).toBe(MIN_DELAY_BUCKET_MS);
    expect(bucketFor(0, MAX)).toBe(MIN_DELAY_BUCKET_MS);
    expect(bucketFor(-5, MAX)).toBe(MIN_DELAY_BUCKET_MS);
  });

  it('takes the longest delay queue for a wait of years, or past any Date, and no longer one', () => {
    expect(bucketFor(3 * YEAR_MS, MAX)).toBe(MAX);
    expect(bucketFor(1e300, MAX)).toBe(MAX);
    expect(bucketFor(Number.POSITIVE_INFINITY, MAX)).toBe(MAX);
    expect(bucketFor(3 * YEAR_MS, 4_096)).toBe(4_096);
  });
});

describe('notBeforeOf', () => {
  const now = 1_700_000_000_000;

  it('is undefined without a deliverAt, or when its time has come', () => {
    expect(notBeforeOf(undefined, now)).toBeUndefined();
    expect(notBeforeOf(now, now)).toBeUndefined();
    expect(notBeforeOf(now - 1, now)).toBeUndefined();
  });

  it('rounds a time between two ms up: never before it', () => {
    expect(notBeforeOf(now + 1_000.2, now)).toBe(now + 1_001);
  });

  it('keeps a time years ahead, up to the last a Date holds', () => {
    expect(notBeforeOf(now + 3 * YEAR_MS, now)).toBe(now + 3 * YEAR_MS);
    expect(notBeforeOf(LATEST_TIME_MS, now)).toBe(LATEST_TIME_MS);
  });

  it.each([Number.NaN, Number.POSITIVE_INFINITY, LATEST_TIME_MS + 1, 1e300])(
    'refuses %s with invalid-option',
    (deliverAt) => {
      let error: unknown;
      try {
        notBeforeOf(deliverAt, now);
      } catch (thrown) {
        error = thrown;
      }
      expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      expect((error as Error).message).toContain('deliverAt');
    },
  );
});

describe('readFacts of x-harrier-not-before', () => {
  it('reads a time', () => {
    expect(notBeforeRead('1700000000000')).toEqual({ notBefore: 1_700_000_000_000, dropped: [] });
    expect(notBeforeRead(String(LATEST_TIME_MS))).toEqual({ notBefore: LATEST_TIME_MS, dropped: [] });
  });

  it.each(['NaN', 'soon', '1e300', 'Infinity', String(LATEST_TIME_MS + 1)])(
    'drops %s as malformed: the message is not sent round the delay queues for ever',
    (value) => {
      expect(notBeforeRead(value)).toEqual({ notBefore: undefined, dropped: ['x-harrier-not-before'] });
    },
  );
});
