import { describe, expect, it } from 'vitest';
import { HarrierError, silentLogger } from '../../../src/index.js';
import { BullMqBroker, type BullMqBrokerOptions } from '../../../src/redis/index.js';

/** The error the constructor throws for `options`, or undefined. No Redis: the client connects lazily. */
function constructionError(options: Partial<BullMqBrokerOptions>): unknown {
  try {
    void new BullMqBroker({ connection: 'redis://127.0.0.1:1', logger: silentLogger, ...options }).close();
    return undefined;
  } catch (error) {
    return error;
  }
}

describe('BullMqBroker', () => {
  describe('constructor', () => {
    describe.each([
      ['failedRetentionCount', -1],
      ['failedRetentionCount', 2.5],
      ['failedRetentionCount', Number.NaN],
      ['failedRetentionMs', -1],
      ['failedRetentionMs', Number.POSITIVE_INFINITY],
      ['dedupeWindowMs', 0],
      ['dedupeWindowMs', 1.5],
    ] as const)('when %s is %s', (option, value) => {
      it('throws invalid-option naming the option and what it takes', () => {
        const error = constructionError({ [option]: value });
        expect(HarrierError.is(error) && error.code).toBe('invalid-option');
        expect((error as Error).message).toContain(`option ${option} is ${String(value)}`);
        expect((error as Error).message).toContain('must be a whole number of at least');
      });
    });

    describe('when the retention options are 0 (keep no failed job)', () => {
      it('accepts them', () => {
        expect(constructionError({ failedRetentionCount: 0, failedRetentionMs: 0 })).toBeUndefined();
      });
    });
  });
});
