import { describe, expect, it } from 'vitest';
import { settlesWithin, withDeadline } from '../../../src/clock/deadline.js';

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
