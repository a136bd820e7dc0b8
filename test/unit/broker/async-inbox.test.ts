import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { AsyncInbox } from '../../../src/broker/async-inbox.js';

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

    it('hands a push straight to the waiting next(), which settles within one microtask', async () => {
      const inbox = new AsyncInbox<number>();
      let got: number | undefined;
      const waiting = inbox.next().then((item) => (got = item));
      inbox.push(4);
      // Not queued: the item went to the waiter.
      expect(inbox.take()).toBeUndefined();
      await Promise.resolve();
      expect(got).toBe(4);
      await waiting;
    });

    it('keeps pushes made while nobody waits, in order, for the next calls', async () => {
      const inbox = new AsyncInbox<number>();
      const first = inbox.next();
      inbox.push(1);
      inbox.push(2);
      inbox.push(3);
      await expect(first).resolves.toBe(1);
      await expect(inbox.next()).resolves.toBe(2);
      expect(inbox.drain()).toEqual([3]);
    });

    it('ends the wait with undefined when its signal aborts, and hands later pushes to the next call', async () => {
      const inbox = new AsyncInbox<number>();
      const abort = new AbortController();
      const waiting = inbox.next(abort.signal);
      abort.abort();
      await expect(waiting).resolves.toBeUndefined();
      await expect(inbox.next(abort.signal)).resolves.toBeUndefined();
      inbox.push(5);
      await expect(inbox.next()).resolves.toBe(5);
    });

    describe('when a signal an earlier call passed aborts during a wait given no signal', () => {
      it('keeps waiting, and hands that wait the next push', async () => {
        const inbox = new AsyncInbox<number>();
        const abort = new AbortController();
        inbox.push(1);
        await expect(inbox.next(abort.signal)).resolves.toBe(1);
        const waiting = inbox.next();
        abort.abort();
        inbox.push(2);
        // Neither closed nor given a signal: the wait ends only with an item.
        await expect(waiting).resolves.toBe(2);
        expect(inbox.drain()).toEqual([]);
      });
    });
  });
});
