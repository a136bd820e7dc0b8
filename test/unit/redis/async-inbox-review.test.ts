import { describe, expect, it } from 'vitest';
import { AsyncInbox } from '../../../src/redis/async-inbox.js';

describe('AsyncInbox', () => {
  describe('.next', () => {
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
