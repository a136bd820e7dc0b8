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
      ['lockDurationMs', 999],
      ['lockDurationMs', 2_500.5],
      ['lockRenewMs', 99],
      ['lockRenewMs', Number.NaN],
      ['stalledIntervalMs', 0],
      ['stalledIntervalMs', Number.POSITIVE_INFINITY],
    ] as const)('when %s is %s', (option, value) => {
      it('throws invalid-option naming the option and what it takes', () => {
        const error = constructionError({ [option]: value });
        expect(HarrierError.is(error) && error.code).toBe('invalid-option');
        expect((error as Error).message).toContain(`option ${option} is ${String(value)}`);
        expect((error as Error).message).toContain('must be a whole number of at least');
      });
    });

    describe('when lockRenewMs is not less than lockDurationMs', () => {
      it('throws invalid-option saying the lock would expire first and what to set', () => {
        const error = constructionError({ lockDurationMs: 4_000, lockRenewMs: 4_000 });
        expect(HarrierError.is(error) && error.code).toBe('invalid-option');
        expect((error as Error).message).toContain('option lockRenewMs is 4000');
        expect((error as Error).message).toContain('must be less than lockDurationMs (4000)');
        expect((error as Error).message).toContain('e.g. 2000');
      });
    });

    describe('when lockRenewMs is left out and lockDurationMs is set', () => {
      it('accepts it (renewing at half the lock duration)', () => {
        expect(constructionError({ lockDurationMs: 1_000 })).toBeUndefined();
      });
    });

    describe('when lockRenewMs alone is set beyond the default lock duration', () => {
      it('throws invalid-option naming the default lock duration', () => {
        const error = constructionError({ lockRenewMs: 6_000 });
        expect(HarrierError.is(error) && error.code).toBe('invalid-option');
        expect((error as Error).message).toContain('must be less than lockDurationMs (5000)');
      });
    });

    describe('when the retention options are 0 (keep no failed job)', () => {
      it('accepts them', () => {
        expect(constructionError({ failedRetentionCount: 0, failedRetentionMs: 0 })).toBeUndefined();
      });
    });
  });
});
