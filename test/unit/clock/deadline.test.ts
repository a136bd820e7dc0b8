import { describe, expect, it } from 'vitest';
import { Deadlines, settlesWithin, withDeadline } from '../../../src/clock/deadline.js';

const never = new Promise<never>(() => undefined);

describe('settlesWithin', () => {
  describe('when the promise settles in time', () => {
    it('resolves true, whether it resolved or rejected', async () => {
      expect(await settlesWithin(Promise.resolve(1), 1_000)).toBe(true);
      expect(await settlesWithin(Promise.reject(new Error('x')), 1_000)).toBe(true);
    });
  });

  describe('when the promise never settles', () => {
    it('resolves false once the time has run out', async () => {
      const started = Date.now();
      expect(await settlesWithin(never, 30)).toBe(false);
      expect(Date.now() - started).toBeGreaterThanOrEqual(25);
    });
  });
});

describe('withDeadline', () => {
  describe('when the promise settles in time', () => {
    it('settles as it does', async () => {
      await expect(withDeadline(Promise.resolve('ok'), 1_000, () => new Error('late'))).resolves.toBe('ok');
      await expect(
        withDeadline(Promise.reject(new Error('boom')), 1_000, () => new Error('late')),
      ).rejects.toThrow('boom');
    });
  });

  describe('when the promise never settles', () => {
    it('rejects with the error onTimeout makes', async () => {
      await expect(withDeadline(never, 20, () => new Error('late'))).rejects.toThrow('late');
    });
  });
});

const timers = (): number => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;

describe('Deadlines', () => {
  describe('.bound', () => {
    describe('when the promise settles in time', () => {
      it('settles as it does and leaves no timer behind', async () => {
        const before = timers();
        const deadlines = new Deadlines(1_000);
        const late = (): Error => new Error('late');
        await expect(deadlines.bound(Promise.resolve('ok'), late)).resolves.toBe('ok');
        await expect(deadlines.bound(Promise.reject(new Error('boom')), late)).rejects.toThrow('boom');
        expect(deadlines.pending).toBe(0);
        expect(timers()).toBe(before);
      });
    });

    describe('when the promise never settles', () => {
      it('rejects with the error onTimeout makes, once its own time has run out', async () => {
        const deadlines = new Deadlines(60);
        const started = performance.now();
        const first = deadlines.bound(never, () => new Error('first late'));
        await new Promise((resolve) => setTimeout(resolve, 30));
        let secondSettled = false;
        const second = deadlines.bound(never, () => new Error('second late'));
        second.catch(() => (secondSettled = true));
        await expect(first).rejects.toThrow('first late');
        expect(performance.now() - started).toBeGreaterThanOrEqual(55);
        expect(secondSettled).toBe(false);
        expect(deadlines.pending).toBe(1);
        await expect(second).rejects.toThrow('second late');
        expect(performance.now() - started).toBeGreaterThanOrEqual(85);
        expect(deadlines.pending).toBe(0);
      });
    });

    describe('when calls settle out of order among ones that never do', () => {
      it('times out only the ones that did not settle', async () => {
        const deadlines = new Deadlines(40);
        const resolvers: ((value: number) => void)[] = [];
        const calls = Array.from({ length: 3000 }, (_, i) =>
          deadlines.bound(
            i % 3 === 0 ? never : new Promise<number>((resolve) => resolvers.push(resolve)),
            () => new Error(`late ${i}`),
          ),
        );
        for (const [i, resolve] of resolvers.reverse().entries()) resolve(i);
        const outcomes = await Promise.allSettled(calls);
        expect(outcomes.filter((o) => o.status === 'rejected')).toHaveLength(1000);
        expect(outcomes.every((o, i) => (o.status === 'rejected') === (i % 3 === 0))).toBe(true);
        expect(deadlines.pending).toBe(0);
      });
    });
  });
});
