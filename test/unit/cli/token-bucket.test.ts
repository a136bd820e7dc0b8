import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { TokenBucket } from '../../../src/cli/progress.js';

describe('TokenBucket', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  describe('when the rate is below one per second (harrier dlq replay --rate 0.5)', () => {
    it('gives a token every 1 / rate seconds instead of waiting forever', async () => {
      const bucket = new TokenBucket(0.5);
      let taken = 0;
      const takeTwo = (async () => {
        await bucket.take();
        taken++;
        await bucket.take();
        taken++;
      })();

      await vi.advanceTimersByTimeAsync(1_000);
      expect(taken).toBe(1);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(taken).toBe(1);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(taken).toBe(2);
      await takeTwo;
    });
  });

  describe('when the rate is above one per second', () => {
    it('gives the first token at once and then `rate` a second', async () => {
      const bucket = new TokenBucket(4);
      let taken = 0;
      const work = (async () => {
        for (let i = 0; i < 5; i++) {
          await bucket.take();
          taken++;
        }
      })();
      await vi.advanceTimersByTimeAsync(0);
      expect(taken).toBe(1);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(taken).toBe(5);
      await work;
    });
  });
});
