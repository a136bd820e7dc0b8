import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/clock/manual-clock.js';
import { InMemorySagaStore } from '../../../src/sagas/in-memory-saga-store.js';
import type { SagaWrite } from '../../../src/sagas/saga-store.js';

const DAY = 24 * 60 * 60 * 1000;

function write(fields: Partial<SagaWrite> = {}): SagaWrite {
  return { saga: 'fulfilment', id: 'o-1', state: {}, status: 'active', timeouts: [], now: 0, ...fields };
}

describe(InMemorySagaStore, () => {
  describe('new InMemorySagaStore', () => {
    it('refuses a retention that is not a positive whole number with invalid-option', () => {
      for (const completedRetentionMs of [0, -1, 1.5, Number.NaN]) {
        expect(() => new InMemorySagaStore({ completedRetentionMs })).toThrow(
          expect.objectContaining({ code: 'invalid-option' }),
        );
      }
    });
  });

  describe('completed retention', () => {
    it('defaults to 7 days, measured with the store clock from the completing save', async () => {
      const clock = new ManualClock();
      const store = new InMemorySagaStore({ clock });
      // The write's `now` is the caller's business; retention runs on the store's clock, as a Redis TTL does.
      await store.save(write({ status: 'completed', now: 0 }), 0);
      clock.advance(7 * DAY - 1);
      expect(await store.get('fulfilment', 'o-1')).toBeDefined();
      clock.advance(1);
      expect(await store.get('fulfilment', 'o-1')).toBeUndefined();
    });

    it('restarts with each save of the completed instance, and stops when it is saved active', async () => {
      const clock = new ManualClock();
      const store = new InMemorySagaStore({ clock, completedRetentionMs: 1000 });
      await store.save(write({ status: 'completed' }), 0);
      clock.advance(900);
      await store.save(write({ status: 'completed' }), 1);
      clock.advance(900);
      expect((await store.get('fulfilment', 'o-1'))?.version).toBe(2);
      await store.save(write(), 2);
      clock.advance(10 * DAY);
      expect((await store.get('fulfilment', 'o-1'))?.version).toBe(3);
    });
  });
});
