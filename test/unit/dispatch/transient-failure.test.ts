import { describe, expect, it } from 'vitest';
import {
  DEFAULT_RETRY,
  HarrierError,
  TransientError,
  UnrecoverableError,
  isTransientFailure,
} from '../../../src/index.js';
import { backoffDelay } from '../../../src/extend.js';

/** An error as node-postgres or Node's net module makes it: a message and a string `code`. */
function coded(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

describe('isTransientFailure', () => {
  describe('when a dependency is unreachable', () => {
    it.each([
      ['a TransientError', new TransientError('payments API down')],
      ['postgres-unavailable', new HarrierError('postgres-unavailable', 'gone')],
      ['redis-unavailable', new HarrierError('redis-unavailable', 'gone')],
      ['rabbitmq-unavailable', new HarrierError('rabbitmq-unavailable', 'gone')],
      ['ECONNREFUSED', coded('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED')],
      ['ECONNRESET', coded('read ECONNRESET', 'ECONNRESET')],
      ['ETIMEDOUT', coded('connect ETIMEDOUT', 'ETIMEDOUT')],
      [
        'PostgreSQL admin shutdown (57P01)',
        coded('terminating connection due to administrator command', '57P01'),
      ],
      ['PostgreSQL cannot connect now (57P03)', coded('the database system is starting up', '57P03')],
      ['a PostgreSQL connection exception (08006)', coded('connection failure', '08006')],
      ['pg: Connection terminated unexpectedly', new Error('Connection terminated unexpectedly')],
      ['pg: a closed client', new Error('Client was closed and is not queryable')],
      ['pg: a pool connect time-out', new Error('timeout exceeded when trying to connect')],
      ['ioredis: Connection is closed.', new Error('Connection is closed.')],
      [
        'ioredis: MaxRetriesPerRequestError',
        Object.assign(new Error('Reached the max retries per request limit'), {
          name: 'MaxRetriesPerRequestError',
        }),
      ],
      [
        'an error whose cause is ECONNREFUSED',
        new HarrierError('publish-failed', 'publish failed', {
          cause: coded('connect ECONNREFUSED', 'ECONNREFUSED'),
        }),
      ],
      ['an AggregateError holding one', new AggregateError([coded('x', 'ECONNREFUSED')], 'all failed')],
    ])('says %s is transient', (_name, error) => {
      expect(isTransientFailure(error)).toBe(true);
    });
  });

  describe('when the message or the handler is at fault', () => {
    it.each([
      ['a plain Error', new Error('order not found')],
      ['a unique violation (23505)', coded('duplicate key value', '23505')],
      ['a serialization failure (40001)', coded('could not serialize access', '40001')],
      ['an UnrecoverableError', new UnrecoverableError('no such order')],
      ['an internal HarrierError', new HarrierError('internal', 'a bug')],
      ['a string', 'ECONNREFUSED'],
      ['undefined', undefined],
    ])('says %s is not transient', (_name, error) => {
      expect(isTransientFailure(error)).toBe(false);
    });

    it('follows a cause chain that loops without looping for ever', () => {
      const a = new Error('a') as Error & { cause?: unknown };
      const b = new Error('b', { cause: a });
      a.cause = b;
      expect(isTransientFailure(a)).toBe(false);
    });
  });

  describe('with a classifier', () => {
    it('lets the classifier mark its own errors transient, and decide against the built-in rules', () => {
      class HttpDown extends Error {}
      const classify = (error: unknown): boolean | undefined =>
        error instanceof HttpDown
          ? true
          : error instanceof Error && error.message === 'refused'
            ? false
            : undefined;
      expect(isTransientFailure(new HttpDown('503'), classify)).toBe(true);
      expect(isTransientFailure(coded('refused', 'ECONNREFUSED'), classify)).toBe(false);
      expect(isTransientFailure(coded('x', 'ECONNRESET'), classify)).toBe(true);
      expect(isTransientFailure(new Error('plain'), classify)).toBe(false);
    });

    it('falls back to the built-in rules when the classifier throws', () => {
      const classify = (): boolean => {
        throw new Error('bug');
      };
      expect(isTransientFailure(coded('x', 'ECONNRESET'), classify)).toBe(true);
    });
  });
});

describe('DEFAULT_RETRY', () => {
  it('makes 2 immediate retries, then delayed ones spanning at least a minute before the last attempt', () => {
    const delays = Array.from({ length: DEFAULT_RETRY.attempts - 1 }, (_, i) =>
      backoffDelay(DEFAULT_RETRY, i + 1, () => 0),
    );
    expect(delays.slice(0, 2)).toEqual([0, 0]);
    expect(delays.slice(2).every((d) => d > 0)).toBe(true);
    // random() = 0 is the shortest the jitter makes them.
    expect(delays.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(60_000);
  });
});
