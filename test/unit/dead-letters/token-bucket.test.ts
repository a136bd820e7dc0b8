import { beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/clock/manual-clock.js';
import { TokenBucket } from '../../../src/dead-letters/token-bucket.js';

/** Lets every promise continuation that is ready run (no time passes on the manual clock). */
const settled = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('TokenBucket', () => {
  let clock: ManualClock;

  beforeEach(() => {
    clock = new ManualClock();
  });

  async function advance(ms: number): Promise<void> {
    clock.advance(ms);
    await settled();
  }

  describe('when the rate is below one per second (harrier dlq replay --rate 0.5)', () => {
    it('gives a token every 1 / rate seconds instead of waiting forever', async () => {
      const bucket = new TokenBucket(0.5, clock);
      let taken = 0;
      const takeTwo = (async () => {
        await bucket.take();
        taken++;
        await bucket.take();
        taken++;
      })();

      await advance(1_000);
      expect(taken).toBe(1);
      await advance(1_000);
      expect(taken).toBe(1);
      await advance(1_000);
      expect(taken).toBe(2);
      await takeTwo;
    });
  });

  describe('when the rate is above one per second', () => {
    it('gives the first token at once and then `rate` a second', async () => {
      const bucket = new TokenBucket(4, clock);
      let taken = 0;
      const work = (async () => {
        for (let i = 0; i < 5; i++) {
          await bucket.take();
          taken++;
        }
      })();
      await settled();
      expect(taken).toBe(1);
      expect(clock.nextTimerAt()).toBe(clock.now() + 250);
      for (let i = 0; i < 4; i++) await advance(250);
      expect(taken).toBe(5);
      await work;
    });
  });
});
