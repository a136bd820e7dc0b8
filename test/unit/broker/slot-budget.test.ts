import { describe, expect, it } from 'vitest';
import { SlotBudget } from '../../../src/broker/slot-budget.js';

describe('SlotBudget', () => {
  describe('.acquire', () => {
    it('grants up to its size at once, then in the order asked as slots come back', async () => {
      const budget = new SlotBudget(2);
      expect(await budget.acquire()).toBe(true);
      expect(await budget.acquire()).toBe(true);
      const granted: string[] = [];
      const first = budget.acquire().then(() => granted.push('first'));
      const second = budget.acquire().then(() => granted.push('second'));
      expect(budget.tryAcquire()).toBe(false);
      budget.release();
      await first;
      expect(granted).toEqual(['first']);
      budget.release();
      await second;
      expect(granted).toEqual(['first', 'second']);
      expect(budget.held).toBe(2);
    });

    describe('when the budget closes', () => {
      it('answers every wait and every later ask with false', async () => {
        const budget = new SlotBudget(1);
        expect(await budget.acquire()).toBe(true);
        const waiting = budget.acquire();
        budget.close();
        expect(await waiting).toBe(false);
        expect(await budget.acquire()).toBe(false);
        expect(budget.tryAcquire()).toBe(false);
      });
    });

    describe('when the signal aborts the wait', () => {
      it('answers false and leaves the slot to the next waiter', async () => {
        const budget = new SlotBudget(1);
        expect(await budget.acquire()).toBe(true);
        const wait = new AbortController();
        const aborted = budget.acquire(wait.signal);
        const next = budget.acquire();
        wait.abort();
        expect(await aborted).toBe(false);
        budget.release();
        expect(await next).toBe(true);
        expect(budget.held).toBe(1);
      });
    });
  });

  describe('.mayPassOn', () => {
    it('lets a holder keep its slot only while nobody waits and the budget is open', async () => {
      const budget = new SlotBudget(1);
      expect(await budget.acquire()).toBe(true);
      expect(budget.mayPassOn()).toBe(true);
      const waiting = budget.acquire();
      expect(budget.mayPassOn()).toBe(false);
      budget.release();
      expect(await waiting).toBe(true);
      expect(budget.mayPassOn()).toBe(true);
      budget.close();
      expect(budget.mayPassOn()).toBe(false);
    });
  });

  describe('.tryAcquire', () => {
    it('takes a free slot only while nobody waits for one', async () => {
      const budget = new SlotBudget(1);
      expect(budget.tryAcquire()).toBe(true);
      expect(budget.tryAcquire()).toBe(false);
      budget.release();
      expect(budget.held).toBe(0);
      expect(budget.tryAcquire()).toBe(true);
      const waiting = budget.acquire();
      budget.release();
      expect(await waiting).toBe(true);
      expect(budget.held).toBe(1);
    });
  });
});
