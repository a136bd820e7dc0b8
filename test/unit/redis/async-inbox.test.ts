import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { AsyncInbox } from '../../../src/redis/async-inbox.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

describe('AsyncInbox', () => {
  describe('.take', () => {
    it('hands items over in order, and undefined when none waits', () => {
      const inbox = new AsyncInbox<number>();
      inbox.push(1);
      inbox.push(2);
      expect([inbox.take(), inbox.take(), inbox.take()]).toEqual([1, 2, undefined]);
    });

    it('keeps no reference to an item it handed over', async () => {
      const inbox = new AsyncInbox<object>();
      // Made, pushed and taken in a function of its own, so no variable here still holds the item.
      const taken = ((): WeakRef<object> => {
        const item = { delivery: 'x'.repeat(1_000) };
        inbox.push(item);
        inbox.push({ next: true });
        expect(inbox.take()).toBe(item);
        return new WeakRef(item);
      })();
      // A WeakRef's target is kept alive until the end of the turn it was read in.
      await new Promise((resolve) => setImmediate(resolve));
      gc();
      expect(taken.deref()).toBeUndefined();
      expect(inbox.drain()).toEqual([{ next: true }]);
    });
  });

  describe('.next', () => {
    it('waits for the next push, and ends with undefined once closed and empty', async () => {
      const inbox = new AsyncInbox<number>();
      const waiting = inbox.next();
      inbox.push(3);
      await expect(waiting).resolves.toBe(3);
      const ended = inbox.next();
      inbox.close();
      await expect(ended).resolves.toBeUndefined();
    });
  });
});
