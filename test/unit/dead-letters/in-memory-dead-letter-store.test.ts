import { describe, expect, it } from 'vitest';
import type { DeadLetterRecord } from '../../../src/dead-letters/dead-letter-store.js';
import { InMemoryDeadLetterStore } from '../../../src/dead-letters/in-memory-dead-letter-store.js';
import { HarrierError } from '../../../src/errors/harrier-error.js';

const T0 = Date.UTC(2026, 0, 1);

function record(id: string): DeadLetterRecord {
  return {
    id,
    messageId: `m-${id}`,
    kind: 'event',
    type: 'orders.OrderPlaced',
    endpoint: 'billing',
    handler: 'SendInvoice',
    reason: 'handler-failed',
    error: { name: 'Error', message: 'boom' },
    attempts: [],
    attemptCount: 1,
    firstFailedAt: T0,
    lastFailedAt: T0,
    fingerprint: 'abcdefabcdef',
    envelope: '{}',
    partitionKey: undefined,
    ordered: false,
    status: 'dead',
    replays: [],
  };
}

describe('InMemoryDeadLetterStore', () => {
  describe('constructor', () => {
    describe('when maxRecords is not a positive integer', () => {
      it('throws invalid-option', () => {
        for (const maxRecords of [0, -1, 1.5, Number.NaN]) {
          expect(() => new InMemoryDeadLetterStore({ maxRecords })).toThrow(
            expect.objectContaining({ code: 'invalid-option' }) as unknown,
          );
        }
      });
    });
  });

  describe('.add', () => {
    describe('when the store is full', () => {
      it('drops the oldest record by first insertion', async () => {
        const store = new InMemoryDeadLetterStore({ maxRecords: 3 });
        for (const id of ['a', 'b', 'c']) await store.add(record(id));
        await store.add(record('a'));
        await store.add(record('d'));
        expect((await store.list()).records.map((r) => r.id)).toEqual(['b', 'c', 'd']);
        expect(await store.get('a')).toBeUndefined();
      });
    });

    describe('when the same id is added again into a full store', () => {
      it('drops nothing', async () => {
        const store = new InMemoryDeadLetterStore({ maxRecords: 2 });
        await store.add(record('a'));
        await store.add(record('b'));
        await store.add(record('b'));
        expect(await store.count()).toBe(2);
      });
    });
  });

  describe('.list', () => {
    describe('when the cursor was not issued by the store', () => {
      it('rejects with invalid-cursor', async () => {
        const store = new InMemoryDeadLetterStore();
        await expect(store.list({}, { cursor: 'not-a-cursor' })).rejects.toMatchObject({
          code: 'invalid-cursor',
        });
      });
    });

    describe('when the limit is not a positive integer', () => {
      it('rejects with invalid-argument', async () => {
        const store = new InMemoryDeadLetterStore();
        await expect(store.list({}, { limit: 0 })).rejects.toMatchObject({ code: 'invalid-argument' });
      });
    });

    describe('when many records were removed before the cursor', () => {
      it('continues right after the cursor', async () => {
        const store = new InMemoryDeadLetterStore();
        const ids = Array.from({ length: 3000 }, (_, i) => `r${i}`);
        for (const id of ids) await store.add(record(id));
        const first = await store.list({}, { limit: 2500 });
        await store.remove(ids.slice(0, 2500));
        const second = await store.list(
          {},
          { limit: 1000, ...(first.next !== undefined ? { cursor: first.next } : {}) },
        );
        expect(second.records.map((r) => r.id)).toEqual(ids.slice(2500));
        expect(second.next).toBeUndefined();
      });
    });
  });

  describe('.close', () => {
    describe('when the store is used after closing', () => {
      it('rejects with store-closed', async () => {
        const store = new InMemoryDeadLetterStore();
        await store.close();
        await store.close();
        const error: unknown = await store.get('a').catch((e: unknown) => e);
        expect(HarrierError.is(error)).toBe(true);
        expect(error).toMatchObject({ code: 'store-closed' });
      });
    });
  });
});
