import { describe, expect, it } from 'vitest';
import { KeyedLock } from '../../../src/sagas/keyed-lock.js';

describe('KeyedLock', () => {
  describe('.run', () => {
    it('runs work of one key one at a time, in arrival order', async () => {
      const lock = new KeyedLock();
      const events: string[] = [];
      const step = (name: string) => async () => {
        events.push(`${name} start`);
        await new Promise((resolve) => setImmediate(resolve));
        events.push(`${name} end`);
        return name;
      };
      const results = await Promise.all([
        lock.run('k', step('a')),
        lock.run('k', step('b')),
        lock.run('k', step('c')),
      ]);
      expect(results).toEqual(['a', 'b', 'c']);
      expect(events).toEqual(['a start', 'a end', 'b start', 'b end', 'c start', 'c end']);
      expect(lock.size).toBe(0);
    });

    it('runs work of different keys concurrently', async () => {
      const lock = new KeyedLock();
      let release!: () => void;
      const blocked = lock.run('a', () => new Promise<void>((resolve) => (release = resolve)));
      await expect(lock.run('b', () => Promise.resolve('b'))).resolves.toBe('b');
      release();
      await blocked;
    });

    it('lets the next holder run after a holder failed', async () => {
      const lock = new KeyedLock();
      const failed = lock.run('k', () => Promise.reject(new Error('boom')));
      const next = lock.run('k', () => Promise.resolve('next'));
      await expect(failed).rejects.toThrow('boom');
      await expect(next).resolves.toBe('next');
      expect(lock.size).toBe(0);
    });
  });
});
