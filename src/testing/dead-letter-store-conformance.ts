import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AttemptRecord, ErrorInfo } from '../broker/message-broker.js';
import { buildDeadLetterRecord } from '../dead-letters/dead-letter-record.js';
import {
  MAX_REPLAY_HISTORY,
  type DeadLetterFilter,
  type DeadLetterGroup,
  type DeadLetterPage,
  type DeadLetterReason,
  type DeadLetterRecord,
  type DeadLetterStore,
  type ReplayRecord,
} from '../dead-letters/dead-letter-store.js';
import { deadLetterGroups } from '../dead-letters/dead-letter-groups.js';
import { uuidv7 } from '../messages/uuid-v7.js';
import { expectCode, failureOf } from './expect-code.js';

/** A store under test and how to clean up after it. */
export interface DeadLetterStoreFixture {
  /** A new, empty store (for a shared server: its own key prefix). */
  readonly store: DeadLetterStore;
  /** Removes what the test left behind; called after each test, before the suite closes the store. */
  readonly cleanup?: () => Promise<void>;
}

/** Makes a fresh fixture for one test. */
export type DeadLetterStoreFactory = () => Promise<DeadLetterStoreFixture>;

const T0 = Date.UTC(2026, 0, 1);

interface RecordSpec {
  readonly messageId?: string;
  readonly endpoint?: string;
  readonly handler?: string;
  readonly type?: string;
  readonly reason?: DeadLetterReason;
  readonly errorMessage?: string;
  /** The attempt that failed last; the ones before it are in the history, a second apart. */
  readonly attempt?: number;
  /** When the last attempt failed. */
  readonly failedAt?: number;
  readonly fingerprint?: string;
  /** The message's payload. @defaultValue \{ orderId: 'o-1' \} */
  readonly payload?: Record<string, unknown>;
}

/** A realistic dead letter with a message id of its own, so tests never collide on a shared server. */
function deadLetter(spec: RecordSpec = {}): DeadLetterRecord {
  const messageId = spec.messageId ?? uuidv7();
  const endpoint = spec.endpoint ?? 'billing';
  const handler = spec.handler ?? 'SendInvoice';
  const type = spec.type ?? 'orders.OrderPlaced';
  const failedAt = spec.failedAt ?? T0;
  const attempt = spec.attempt ?? 3;
  const error: ErrorInfo = {
    name: 'Error',
    message: spec.errorMessage ?? 'boom',
    stack: `Error: ${spec.errorMessage ?? 'boom'}\n    at SendInvoice.handle (/app/src/billing/send-invoice.ts:12:11)`,
  };
  const history: AttemptRecord[] = Array.from({ length: attempt - 1 }, (_, i) => ({
    attempt: i + 1,
    at: failedAt - (attempt - 1 - i) * 1000,
    error,
  }));
  const body = JSON.stringify({
    v: 1,
    id: messageId,
    kind: 'event',
    type,
    payload: spec.payload ?? { orderId: 'o-1' },
    meta: { correlationId: messageId, occurredAt: new Date(failedAt).toISOString(), headers: {} },
  });
  const record = buildDeadLetterRecord({
    body,
    facts: { messageId, kind: 'event', type, endpoint, handler, attempt, history, partitionKey: 'o-1' },
    handler,
    reason: spec.reason ?? 'handler-failed',
    error,
    ordered: false,
    now: failedAt,
  });
  return spec.fingerprint === undefined ? record : { ...record, fingerprint: spec.fingerprint };
}

/** The first item, failing the test when there is none. */
function firstOf<T>(items: readonly T[]): T {
  const [item] = items;
  if (item === undefined) throw new Error('expected at least one item');
  return item;
}

/** The cursor of the next page, failing the test on a last page. */
function nextOf(page: DeadLetterPage): string {
  if (page.next === undefined) throw new Error('expected another page, but next is undefined');
  return page.next;
}

const ids = (records: readonly DeadLetterRecord[]): string[] => records.map((r) => r.id);

interface FieldCase {
  readonly field: string;
  /** A record matching `filter`. */
  readonly spec: RecordSpec;
  readonly filter: DeadLetterFilter;
}

const FIELD_CASES: readonly FieldCase[] = [
  { field: 'endpoint', spec: { endpoint: 'shipping' }, filter: { endpoint: 'shipping' } },
  { field: 'type', spec: { type: 'orders.OrderCancelled' }, filter: { type: 'orders.OrderCancelled' } },
  { field: 'handler', spec: { handler: 'NotifyCustomer' }, filter: { handler: 'NotifyCustomer' } },
  { field: 'reason', spec: { reason: 'validation-failed' }, filter: { reason: 'validation-failed' } },
  { field: 'fingerprint', spec: { fingerprint: 'f00dfeed0001' }, filter: { fingerprint: 'f00dfeed0001' } },
];

/**
 * Registers the vitest suite that every {@link DeadLetterStore} must pass.
 *
 * @remarks
 * Each test gets a fresh store from `factory`, so the store it returns must start empty (on a shared
 * server, give it a key prefix of its own). Every record also carries a new message id. After each
 * test the suite awaits `cleanup`, then closes the store.
 *
 * @param name - names the implementation in the test report.
 * @param factory - makes a new, empty store for one test.
 *
 * @example
 * ```ts
 * import { describeDeadLetterStoreConformance } from 'harrier/testing/conformance';
 *
 * describeDeadLetterStoreConformance('MyDeadLetterStore', async () => {
 *   const store = new MyDeadLetterStore({ prefix: `test:${randomUUID()}` });
 *   return { store, cleanup: () => store.destroy() };
 * });
 * ```
 */
export function describeDeadLetterStoreConformance(name: string, factory: DeadLetterStoreFactory): void {
  describe(`DeadLetterStore conformance: ${name}`, () => {
    let store: DeadLetterStore;
    let cleanup: (() => Promise<void>) | undefined;

    beforeEach(async () => {
      const fixture = await factory();
      store = fixture.store;
      cleanup = fixture.cleanup;
    });

    afterEach(async () => {
      await cleanup?.();
      await store.close();
    });

    /** Adds records one at a time, so their insertion order is the order given. */
    async function addAll<T extends DeadLetterRecord[]>(...records: T): Promise<T> {
      for (const record of records) await store.add(record);
      return records;
    }

    /** The stored record with `id`, failing the test when there is none. */
    async function mustGet(id: string): Promise<DeadLetterRecord> {
      const record = await store.get(id);
      if (record === undefined) throw new Error(`expected the store to hold dead letter "${id}"`);
      return record;
    }

    /** Walks every page of `filter` and returns the pages. */
    async function allPages(
      filter: DeadLetterFilter,
      limit: number,
    ): Promise<(readonly DeadLetterRecord[])[]> {
      const pages: (readonly DeadLetterRecord[])[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.list(filter, cursor === undefined ? { limit } : { limit, cursor });
        pages.push(page.records);
        cursor = page.next;
        if (pages.length > 1000) throw new Error('list never returned a last page (next stays defined)');
      } while (cursor !== undefined);
      return pages;
    }

    describe('.add', () => {
      describe('when the id is new', () => {
        it('stores the record as given', async () => {
          const record = deadLetter();
          await store.add(record);
          expect(await store.get(record.id)).toEqual(record);
        });

        it('returns the stored record', async () => {
          const record = deadLetter();
          expect(await store.add(record)).toEqual(record);
        });

        it('keeps the log position of a projection record', async () => {
          const record = {
            ...deadLetter({ reason: 'projection-failed' }),
            logPosition: { topic: 'orders', partition: 3, offset: 1234 },
          };
          await store.add(record);
          expect((await store.get(record.id))?.logPosition).toEqual({
            topic: 'orders',
            partition: 3,
            offset: 1234,
          });
        });
      });

      describe('when a record with the same id exists', () => {
        it('keeps one record under that id', async () => {
          const id = uuidv7();
          await store.add(deadLetter({ messageId: id, failedAt: T0 }));
          await store.add(deadLetter({ messageId: id, failedAt: T0 + 60_000 }));
          expect(await store.count({ status: 'any' })).toBe(1);
        });

        it('keeps the firstFailedAt of the stored record', async () => {
          const id = uuidv7();
          const first = deadLetter({ messageId: id, failedAt: T0 });
          const again = deadLetter({ messageId: id, failedAt: T0 + 60_000 });
          await store.add(first);
          const returned = await store.add(again);
          expect(again.firstFailedAt).not.toBe(first.firstFailedAt);
          expect(returned.firstFailedAt).toBe(first.firstFailedAt);
          expect((await store.get(first.id))?.firstFailedAt).toBe(first.firstFailedAt);
        });

        it('keeps the replay history of the stored record', async () => {
          const id = uuidv7();
          const first = deadLetter({ messageId: id, failedAt: T0 });
          await store.add(first);
          await store.markReplayed(first.id, { at: T0 + 1000, by: 'alice' });
          await store.add(deadLetter({ messageId: id, failedAt: T0 + 2000 }));
          await store.markReplayed(first.id, { at: T0 + 3000, by: 'bob' });
          const returned = await store.add(deadLetter({ messageId: id, failedAt: T0 + 4000 }));
          const expected = [
            { at: T0 + 1000, by: 'alice' },
            { at: T0 + 3000, by: 'bob' },
          ];
          expect(returned.replays).toEqual(expected);
          expect((await store.get(first.id))?.replays).toEqual(expected);
        });

        it('sets the status back to dead', async () => {
          const id = uuidv7();
          const first = deadLetter({ messageId: id, failedAt: T0 });
          await store.add(first);
          await store.markReplayed(first.id, { at: T0 + 1000 });
          const returned = await store.add(deadLetter({ messageId: id, failedAt: T0 + 2000 }));
          expect(returned.status).toBe('dead');
          expect((await store.get(first.id))?.status).toBe('dead');
          expect(await store.count()).toBe(1);
        });

        it('takes every other field from the new record', async () => {
          const id = uuidv7();
          const first = deadLetter({ messageId: id, failedAt: T0, attempt: 2, errorMessage: 'first' });
          const again = deadLetter({
            messageId: id,
            failedAt: T0 + 60_000,
            attempt: 5,
            errorMessage: 'second',
            reason: 'validation-failed',
            fingerprint: 'abcdefabcdef',
          });
          await store.add(first);
          await store.add(again);
          expect(await store.get(first.id)).toEqual({ ...again, firstFailedAt: first.firstFailedAt });
        });

        it('keeps the record in its first-insertion place', async () => {
          const id = uuidv7();
          const a = deadLetter({ messageId: id });
          const b = deadLetter();
          await addAll(a, b);
          await store.add(deadLetter({ messageId: id, failedAt: T0 + 60_000 }));
          expect(ids((await store.list()).records)).toEqual([a.id, b.id]);
        });
      });

      describe('when the caller changes the record afterwards', () => {
        it('does not change the stored record', async () => {
          const record = deadLetter();
          const snapshot = structuredClone(record);
          await store.add(record);
          (record.attempts as AttemptRecord[]).push({ attempt: 99, at: 0, error: record.error });
          (record.error as { message: string }).message = 'changed';
          (record.replays as ReplayRecord[]).push({ at: 1 });
          (record as { reason: string }).reason = 'changed';
          expect(await store.get(snapshot.id)).toEqual(snapshot);
        });

        it('does not change the stored record through the returned one', async () => {
          const record = deadLetter();
          const returned = await store.add(record);
          (returned.attempts as AttemptRecord[]).length = 0;
          (returned.error as { message: string }).message = 'changed';
          (returned.replays as ReplayRecord[]).push({ at: 1 });
          expect(await store.get(record.id)).toEqual(record);
        });
      });
    });

    describe('.get', () => {
      describe('when the id exists', () => {
        it('returns the record with that id', async () => {
          const [a, b] = await addAll(deadLetter(), deadLetter());
          expect(await store.get(b.id)).toEqual(b);
          expect(await store.get(a.id)).toEqual(a);
        });

        it('returns a replayed record too', async () => {
          const record = deadLetter();
          await store.add(record);
          await store.markReplayed(record.id, { at: T0 + 1000 });
          expect((await store.get(record.id))?.status).toBe('replayed');
        });
      });

      describe('when the id is unknown', () => {
        it('returns undefined', async () => {
          await store.add(deadLetter());
          expect(await store.get('0123456789abcdef0123456789abcdef')).toBeUndefined();
        });
      });

      describe('when the caller changes the returned record', () => {
        it('does not change the stored record', async () => {
          const record = deadLetter();
          await store.add(record);
          await store.markReplayed(record.id, { at: T0 + 1000, by: 'alice' });
          const stored = await mustGet(record.id);
          const snapshot = structuredClone(stored);
          (stored.attempts as AttemptRecord[]).pop();
          (firstOf(stored.attempts).error as { message: string }).message = 'changed';
          (firstOf(stored.replays) as { by?: string }).by = 'mallory';
          (stored.replays as ReplayRecord[]).push({ at: 1 });
          (stored as { status: string }).status = 'dead';
          expect(await store.get(record.id)).toEqual(snapshot);
        });
      });
    });

    describe('.list', () => {
      describe('when the store is empty', () => {
        it('returns an empty last page', async () => {
          expect(await store.list()).toEqual({ records: [], next: undefined });
        });
      });

      describe('when no filter is given', () => {
        it('returns the dead records in first-insertion order', async () => {
          const [a, b, c] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          const page = await store.list();
          expect(page.records).toEqual([a, c]);
          expect(page.next).toBeUndefined();
        });
      });

      describe('when filtering by status', () => {
        it('returns only dead records for status dead', async () => {
          const [a, b, c] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          expect(ids((await store.list({ status: 'dead' })).records)).toEqual([a.id, c.id]);
        });

        it('returns only replayed records for status replayed', async () => {
          const [, b] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          expect(ids((await store.list({ status: 'replayed' })).records)).toEqual([b.id]);
        });

        it('returns every record for status any', async () => {
          const [a, b, c] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          expect(ids((await store.list({ status: 'any' })).records)).toEqual([a.id, b.id, c.id]);
        });
      });

      describe('when filtering by a field', () => {
        it.each(FIELD_CASES)('returns only the records whose $field matches', async ({ spec, filter }) => {
          const [, match1, , match2] = await addAll(
            deadLetter(),
            deadLetter(spec),
            deadLetter(),
            deadLetter(spec),
          );
          expect(ids((await store.list(filter)).records)).toEqual([match1.id, match2.id]);
        });
      });

      describe('when filtering by time', () => {
        it('includes records whose last failure is at or after since', async () => {
          const [, b, c] = await addAll(
            deadLetter({ failedAt: T0 }),
            deadLetter({ failedAt: T0 + 1000 }),
            deadLetter({ failedAt: T0 + 2000 }),
          );
          expect(ids((await store.list({ since: T0 + 1000 })).records)).toEqual([b.id, c.id]);
        });

        it('includes records whose last failure is before until', async () => {
          const [a, b] = await addAll(
            deadLetter({ failedAt: T0 }),
            deadLetter({ failedAt: T0 + 1000 }),
            deadLetter({ failedAt: T0 + 2000 }),
          );
          expect(ids((await store.list({ until: T0 + 2000 })).records)).toEqual([a.id, b.id]);
        });

        it('includes records within since and until', async () => {
          const [, b] = await addAll(
            deadLetter({ failedAt: T0 }),
            deadLetter({ failedAt: T0 + 1000 }),
            deadLetter({ failedAt: T0 + 2000 }),
          );
          expect(ids((await store.list({ since: T0 + 500, until: T0 + 1500 })).records)).toEqual([b.id]);
        });

        it('compares the last failure, not the first', async () => {
          const record = deadLetter({ failedAt: T0 + 10_000, attempt: 5 });
          await store.add(record);
          expect(record.firstFailedAt).toBeLessThan(T0 + 10_000);
          expect(ids((await store.list({ since: T0 + 10_000 })).records)).toEqual([record.id]);
          expect((await store.list({ until: T0 + 10_000 })).records).toEqual([]);
        });
      });

      describe('when combining filters', () => {
        it('returns only the records matching all of them', async () => {
          const [, , match] = await addAll(
            deadLetter({ endpoint: 'shipping' }),
            deadLetter({ reason: 'no-handler' }),
            deadLetter({ endpoint: 'shipping', reason: 'no-handler' }),
          );
          expect(ids((await store.list({ endpoint: 'shipping', reason: 'no-handler' })).records)).toEqual([
            match.id,
          ]);
        });
      });

      describe('when the records span several pages', () => {
        it('returns every record exactly once, in order, at most limit per page', async () => {
          const records = await addAll(...Array.from({ length: 7 }, () => deadLetter()));
          const pages = await allPages({}, 3);
          expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
          expect(ids(pages.flat())).toEqual(ids(records));
        });

        it('returns no cursor after an exactly full last page', async () => {
          const records = await addAll(...Array.from({ length: 4 }, () => deadLetter()));
          const first = await store.list({}, { limit: 2 });
          expect(first.next).toBeDefined();
          const second = await store.list({}, { limit: 2, cursor: nextOf(first) });
          expect(ids(second.records)).toEqual(ids(records.slice(2)));
          expect(second.next).toBeUndefined();
        });

        it('pages through only the records matching the filter', async () => {
          const matching: DeadLetterRecord[] = [];
          for (let i = 0; i < 9; i++) {
            const record = i % 2 === 0 ? deadLetter({ endpoint: 'shipping' }) : deadLetter();
            await store.add(record);
            if (i % 2 === 0) matching.push(record);
          }
          const pages = await allPages({ endpoint: 'shipping' }, 2);
          expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
          expect(ids(pages.flat())).toEqual(ids(matching));
        });
      });

      describe('when no limit is given', () => {
        it('returns at most 100 records per page', async () => {
          const records = await addAll(...Array.from({ length: 101 }, () => deadLetter()));
          const first = await store.list();
          expect(first.records).toHaveLength(100);
          expect(first.next).toBeDefined();
          const second = await store.list({}, { cursor: nextOf(first) });
          expect(ids(second.records)).toEqual(ids(records.slice(100)));
          expect(second.next).toBeUndefined();
        });
      });

      describe('when the store changes between pages', () => {
        it('neither skips nor repeats a record after records already listed are removed', async () => {
          const [a, b, c, d] = await addAll(deadLetter(), deadLetter(), deadLetter(), deadLetter());
          const first = await store.list({}, { limit: 2 });
          expect(ids(first.records)).toEqual([a.id, b.id]);
          await store.remove([a.id, b.id]);
          const second = await store.list({}, { limit: 2, cursor: nextOf(first) });
          expect(ids(second.records)).toEqual([c.id, d.id]);
        });

        it('does not list an updated record again', async () => {
          const messageId = uuidv7();
          const [a, b, c] = await addAll(deadLetter({ messageId }), deadLetter(), deadLetter());
          const first = await store.list({}, { limit: 2 });
          await store.add(deadLetter({ messageId, failedAt: T0 + 60_000 }));
          const second = await store.list({}, { limit: 2, cursor: nextOf(first) });
          expect(ids([...first.records, ...second.records])).toEqual([a.id, b.id, c.id]);
        });

        it('lists a record added meanwhile on a later page', async () => {
          const [a, b, c] = await addAll(deadLetter(), deadLetter(), deadLetter());
          const first = await store.list({}, { limit: 2 });
          const d = deadLetter();
          await store.add(d);
          const second = await store.list({}, { limit: 2, cursor: nextOf(first) });
          expect(ids([...first.records, ...second.records])).toEqual([a.id, b.id, c.id, d.id]);
        });
      });

      describe('when the cursor was not issued by the store', () => {
        it('rejects with HarrierError invalid-cursor', async () => {
          await addAll(deadLetter(), deadLetter());
          expectCode(await failureOf(() => store.list({}, { cursor: 'not-a-cursor' })), 'invalid-cursor');
        });
      });

      describe('when the limit is not a positive whole number', () => {
        it.each([0, -1, 1.5])('rejects %s with HarrierError invalid-argument', async (limit) => {
          expectCode(await failureOf(() => store.list({}, { limit })), 'invalid-argument');
        });
      });

      describe('when the caller changes a listed record', () => {
        it('does not change the stored record', async () => {
          const record = deadLetter();
          await store.add(record);
          const listed = firstOf((await store.list()).records);
          (listed.attempts as AttemptRecord[]).length = 0;
          (listed.error as { message: string }).message = 'changed';
          expect(await store.get(record.id)).toEqual(record);
        });
      });
    });

    describe('.count', () => {
      describe('when the store is empty', () => {
        it('returns 0', async () => {
          expect(await store.count()).toBe(0);
        });
      });

      describe('when no filter is given', () => {
        it('counts only the dead records', async () => {
          const [, b] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          expect(await store.count()).toBe(2);
        });
      });

      describe('when filtering by status', () => {
        it('counts the records of that status, or all for any', async () => {
          const [, b] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          expect(await store.count({ status: 'dead' })).toBe(2);
          expect(await store.count({ status: 'replayed' })).toBe(1);
          expect(await store.count({ status: 'any' })).toBe(3);
        });
      });

      describe('when filtering by a field', () => {
        it.each(FIELD_CASES)('counts only the records whose $field matches', async ({ spec, filter }) => {
          await addAll(deadLetter(), deadLetter(spec), deadLetter(), deadLetter(spec));
          expect(await store.count(filter)).toBe(2);
        });
      });

      describe('when filtering by time', () => {
        it('counts records whose last failure is in [since, until)', async () => {
          await addAll(
            deadLetter({ failedAt: T0 }),
            deadLetter({ failedAt: T0 + 1000 }),
            deadLetter({ failedAt: T0 + 2000 }),
          );
          expect(await store.count({ since: T0 + 1000 })).toBe(2);
          expect(await store.count({ until: T0 + 1000 })).toBe(1);
          expect(await store.count({ since: T0 + 1000, until: T0 + 2000 })).toBe(1);
        });
      });
    });

    describe('text search', () => {
      describe('when the text is in the error message', () => {
        it('lists the records whose error contains it, whatever the case', async () => {
          const [, b] = await addAll(
            deadLetter(),
            deadLetter({ errorMessage: 'Card DECLINED by the bank' }),
            deadLetter({ errorMessage: 'timeout' }),
          );
          expect(ids((await store.list({ text: 'declined' })).records)).toEqual([b.id]);
          expect(ids((await store.list({ text: 'card declined' })).records)).toEqual([b.id]);
        });
      });

      describe('when the text is in the payload', () => {
        it('lists the records whose envelope contains it, whatever the case', async () => {
          const [a] = await addAll(deadLetter({ payload: { sku: 'WIDGET-42' } }), deadLetter());
          expect(ids((await store.list({ text: 'widget-42' })).records)).toEqual([a.id]);
        });
      });

      describe('when the text holds quotes, backslashes or letters beyond ASCII', () => {
        it('matches them as written in the payload and the error', async () => {
          const [a, b] = await addAll(
            deadLetter({ payload: { path: 'C:\\orders\\WIDGET-42' } }),
            deadLetter({ errorMessage: 'Échec du paiement' }),
            deadLetter(),
          );
          // The envelope is JSON, so the payload's backslashes are escaped in the text searched.
          expect(ids((await store.list({ text: '"path":"c:\\\\orders\\\\widget' })).records)).toEqual([a.id]);
          expect(ids((await store.list({ text: 'échec' })).records)).toEqual([b.id]);
        });
      });

      describe('when combined with other filters', () => {
        it('selects only records matching the text and every other field', async () => {
          const [, b] = await addAll(
            deadLetter({ errorMessage: 'stock exhausted' }),
            deadLetter({ errorMessage: 'Stock exhausted', endpoint: 'shipping' }),
            deadLetter({ endpoint: 'shipping' }),
          );
          expect(ids((await store.list({ text: 'STOCK', endpoint: 'shipping' })).records)).toEqual([b.id]);
          expect(await store.count({ text: 'stock', endpoint: 'shipping' })).toBe(1);
          expect(await store.count({ text: 'stock' })).toBe(2);
        });
      });

      describe('when the matches span several pages', () => {
        it('returns every match once, in order, at most limit per page', async () => {
          const matching: DeadLetterRecord[] = [];
          for (let i = 0; i < 10; i++) {
            const record = deadLetter(i % 2 === 0 ? { errorMessage: `needle ${i}` } : {});
            await store.add(record);
            if (i % 2 === 0) matching.push(record);
          }
          const pages = await allPages({ text: 'NEEDLE' }, 2);
          expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
          expect(ids(pages.flat())).toEqual(ids(matching));
        });
      });

      describe('when purging', () => {
        it('deletes only the records that contain the text', async () => {
          const [a, , c] = await addAll(
            deadLetter(),
            deadLetter({ payload: { note: 'poison pill' } }),
            deadLetter(),
          );
          expect(await store.purge({ text: 'Poison' })).toBe(1);
          expect(ids((await store.list()).records)).toEqual([a.id, c.id]);
        });
      });
    });

    describe('groups', () => {
      /** Every group of `filter`, page by page. */
      async function allGroups(filter: DeadLetterFilter = {}, limit = 50): Promise<DeadLetterGroup[][]> {
        const pages: DeadLetterGroup[][] = [];
        let cursor: string | undefined;
        do {
          const page = await deadLetterGroups(
            store,
            filter,
            cursor === undefined ? { limit } : { limit, cursor },
          );
          pages.push([...page.groups]);
          cursor = page.next;
          if (pages.length > 1000) throw new Error('groups never returned a last page');
        } while (cursor !== undefined);
        return pages;
      }

      async function groupsOf(filter: DeadLetterFilter = {}): Promise<Record<string, DeadLetterGroup>> {
        return Object.fromEntries((await allGroups(filter)).flat().map((g) => [g.fingerprint, g]));
      }

      describe('when records are added', () => {
        it('counts each fingerprint with its first and last failure and a sample', async () => {
          await addAll(
            deadLetter({
              fingerprint: 'aaaa00000001',
              failedAt: T0,
              attempt: 3,
              errorMessage: 'card declined',
            }),
            deadLetter({
              fingerprint: 'aaaa00000001',
              failedAt: T0 + 5000,
              attempt: 1,
              errorMessage: 'card declined',
            }),
            deadLetter({
              fingerprint: 'bbbb00000002',
              failedAt: T0 + 1000,
              attempt: 1,
              endpoint: 'shipping',
            }),
          );
          const [page] = await allGroups();
          expect(page).toEqual([
            {
              fingerprint: 'aaaa00000001',
              count: 2,
              firstSeen: T0 - 2000,
              lastSeen: T0 + 5000,
              type: 'orders.OrderPlaced',
              handler: 'SendInvoice',
              endpoint: 'billing',
              reason: 'handler-failed',
              sampleError: 'card declined',
            },
            {
              fingerprint: 'bbbb00000002',
              count: 1,
              firstSeen: T0 + 1000,
              lastSeen: T0 + 1000,
              type: 'orders.OrderPlaced',
              handler: 'SendInvoice',
              endpoint: 'shipping',
              reason: 'handler-failed',
              sampleError: 'boom',
            },
          ]);
        });
      });

      describe('when the groups span several pages', () => {
        it('returns every group once, latest lastSeen first, at most limit per page', async () => {
          for (let i = 0; i < 5; i++) {
            await store.add(
              deadLetter({ fingerprint: `cccc0000000${i}`, failedAt: T0 + i * 1000, attempt: 1 }),
            );
          }
          const pages = await allGroups({}, 2);
          expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
          expect(pages.flat().map((g) => g.lastSeen)).toEqual([4, 3, 2, 1, 0].map((i) => T0 + i * 1000));
        });

        it('orders groups with the same lastSeen by fingerprint, descending, across pages', async () => {
          for (const fp of ['dddd00000001', 'dddd00000003', 'dddd00000002']) {
            await store.add(deadLetter({ fingerprint: fp, attempt: 1 }));
          }
          const pages = await allGroups({}, 1);
          expect(pages.flat().map((g) => g.fingerprint)).toEqual([
            'dddd00000003',
            'dddd00000002',
            'dddd00000001',
          ]);
        });
      });

      describe('when a record is updated (same id)', () => {
        it('moves it to its new fingerprint and keeps its first failure', async () => {
          const messageId = uuidv7();
          await store.add(deadLetter({ messageId, fingerprint: 'eeee00000001', failedAt: T0, attempt: 1 }));
          await store.add(deadLetter({ fingerprint: 'eeee00000001', failedAt: T0 + 10, attempt: 1 }));
          await store.add(
            deadLetter({ messageId, fingerprint: 'eeee00000002', failedAt: T0 + 9000, attempt: 1 }),
          );
          const groups = await groupsOf();
          expect(groups.eeee00000001?.count).toBe(1);
          expect(groups.eeee00000001?.lastSeen).toBe(T0 + 10);
          expect(groups.eeee00000002).toMatchObject({ count: 1, firstSeen: T0, lastSeen: T0 + 9000 });
        });
      });

      describe('when records are removed or purged', () => {
        it('lowers the counts and drops a group left empty', async () => {
          const [a, b, c] = await addAll(
            deadLetter({ fingerprint: 'ffff00000001', failedAt: T0, attempt: 1 }),
            deadLetter({ fingerprint: 'ffff00000001', failedAt: T0 + 1000, attempt: 1 }),
            deadLetter({ fingerprint: 'ffff00000002', attempt: 1 }),
          );
          await store.remove([b.id]);
          expect(await groupsOf()).toMatchObject({ ffff00000001: { count: 1, lastSeen: T0 } });
          await store.remove([a.id]);
          expect(Object.keys(await groupsOf())).toEqual(['ffff00000002']);
          await store.purge({ fingerprint: c.fingerprint });
          expect(await allGroups()).toEqual([[]]);
        });
      });

      describe('when a record is replayed', () => {
        it('counts it only where the status filter selects replayed records', async () => {
          const [a] = await addAll(
            deadLetter({ fingerprint: '999900000001', failedAt: T0 + 5000, attempt: 1 }),
            deadLetter({ fingerprint: '999900000001', failedAt: T0, attempt: 1 }),
          );
          await store.markReplayed(a.id, { at: T0 + 6000 });
          expect(await groupsOf()).toMatchObject({ '999900000001': { count: 1, lastSeen: T0 } });
          expect(await groupsOf({ status: 'replayed' })).toMatchObject({
            '999900000001': { count: 1, lastSeen: T0 + 5000 },
          });
          expect(await groupsOf({ status: 'any' })).toMatchObject({
            '999900000001': { count: 2, firstSeen: T0, lastSeen: T0 + 5000 },
          });
          await store.markReplayed(a.id, { at: T0 + 7000 });
          expect((await groupsOf({ status: 'any' }))['999900000001']?.count).toBe(2);
        });
      });

      describe('when filtering', () => {
        it('counts only the records matching the filter', async () => {
          await addAll(
            deadLetter({ fingerprint: '888800000001', endpoint: 'shipping', errorMessage: 'late truck' }),
            deadLetter({ fingerprint: '888800000001' }),
            deadLetter({ fingerprint: '888800000002' }),
          );
          expect(await groupsOf({ endpoint: 'shipping' })).toMatchObject({ '888800000001': { count: 1 } });
          expect(Object.keys(await groupsOf({ endpoint: 'shipping' }))).toEqual(['888800000001']);
          expect(Object.keys(await groupsOf({ text: 'TRUCK' }))).toEqual(['888800000001']);
          expect(await groupsOf({ fingerprint: '888800000001' })).toMatchObject({
            '888800000001': { count: 2 },
          });
          expect(Object.keys(await groupsOf({ fingerprint: '888800000001' }))).toHaveLength(1);
        });
      });

      describe('when paging is wrong', () => {
        it('rejects a foreign cursor with invalid-cursor and a bad limit with invalid-argument', async () => {
          await store.add(deadLetter());
          expectCode(
            await failureOf(() => deadLetterGroups(store, {}, { cursor: 'nope' })),
            'invalid-cursor',
          );
          expectCode(await failureOf(() => deadLetterGroups(store, {}, { limit: 0 })), 'invalid-argument');
        });
      });
    });

    describe('.markReplayed', () => {
      describe('when the record exists', () => {
        it('returns true and sets the status to replayed', async () => {
          const record = deadLetter();
          await store.add(record);
          expect(await store.markReplayed(record.id, { at: T0 + 1000, by: 'alice' })).toBe(true);
          expect((await store.get(record.id))?.status).toBe('replayed');
        });

        it('appends the replay to the history, oldest first', async () => {
          const record = deadLetter();
          await store.add(record);
          await store.markReplayed(record.id, { at: T0 + 1000, by: 'alice' });
          await store.markReplayed(record.id, { at: T0 + 2000 });
          const stored = await store.get(record.id);
          expect(stored?.replays).toEqual([{ at: T0 + 1000, by: 'alice' }, { at: T0 + 2000 }]);
          expect(stored?.replays[1]?.by).toBeUndefined();
        });

        it('leaves every other field as it was', async () => {
          const record = deadLetter();
          await store.add(record);
          await store.markReplayed(record.id, { at: T0 + 1000 });
          expect(await store.get(record.id)).toEqual({
            ...record,
            status: 'replayed',
            replays: [{ at: T0 + 1000 }],
          });
        });
      });

      describe(`when a record is replayed more than ${MAX_REPLAY_HISTORY} times`, () => {
        it(`keeps only the newest ${MAX_REPLAY_HISTORY} replays`, async () => {
          const record = deadLetter();
          await store.add(record);
          const total = MAX_REPLAY_HISTORY + 5;
          for (let i = 1; i <= total; i++)
            await store.markReplayed(record.id, { at: T0 + i, by: `run-${i}` });
          const replays = (await store.get(record.id))?.replays ?? [];
          expect(replays).toHaveLength(MAX_REPLAY_HISTORY);
          expect(replays[0]).toEqual({ at: T0 + 6, by: 'run-6' });
          expect(replays.at(-1)).toEqual({ at: T0 + total, by: `run-${total}` });
        });
      });

      describe('when no record has the id', () => {
        it('returns false and creates nothing', async () => {
          const record = deadLetter();
          expect(await store.markReplayed(record.id, { at: T0 })).toBe(false);
          expect(await store.get(record.id)).toBeUndefined();
          expect(await store.count({ status: 'any' })).toBe(0);
        });
      });
    });

    describe('.markReplayHandled', () => {
      /**
       * The store's `markReplayHandled`, or skips the test: the method is optional, and a store
       * without it reports replays as pending until they fail again.
       */
      function markReplayHandledOf(skip: (note?: string) => void): DeadLetterStore['markReplayHandled'] {
        if (store.markReplayHandled === undefined) {
          skip(`${name} has no markReplayHandled (optional): its replays stay pending until they fail again`);
        }
        return store.markReplayHandled?.bind(store);
      }

      /** A new record, stored and then replayed at `at` (by `by`, if given). */
      async function replayed(at: number, by?: string): Promise<DeadLetterRecord> {
        const record = deadLetter();
        await store.add(record);
        await store.markReplayed(record.id, by === undefined ? { at } : { at, by });
        return record;
      }

      describe('when the record is replayed', () => {
        it('returns true and sets handledAt on the latest replay only', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          const record = await replayed(T0 + 1000, 'alice');
          await store.add(record);
          await store.markReplayed(record.id, { at: T0 + 2000, by: 'bob' });
          expect(await mark?.(record.id, T0 + 2500)).toBe(true);
          expect((await mustGet(record.id)).replays).toEqual([
            { at: T0 + 1000, by: 'alice' },
            { at: T0 + 2000, by: 'bob', handledAt: T0 + 2500 },
          ]);
        });

        it('leaves the status and every other field as they were', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          const record = await replayed(T0 + 1000);
          await mark?.(record.id, T0 + 1500);
          expect(await store.get(record.id)).toEqual({
            ...record,
            status: 'replayed',
            replays: [{ at: T0 + 1000, handledAt: T0 + 1500 }],
          });
          expect(ids((await store.list({ status: 'replayed' })).records)).toEqual([record.id]);
        });

        it('keeps the first handledAt when marked again', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          const record = await replayed(T0 + 1000);
          await mark?.(record.id, T0 + 1500);
          expect(await mark?.(record.id, T0 + 9000)).toBe(true);
          expect((await mustGet(record.id)).replays).toEqual([{ at: T0 + 1000, handledAt: T0 + 1500 }]);
        });

        it('keeps handledAt through a later failure and replay', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          const record = await replayed(T0 + 1000);
          await mark?.(record.id, T0 + 1500);
          await store.add({ ...record, lastFailedAt: T0 + 3000 });
          await store.markReplayed(record.id, { at: T0 + 4000 });
          expect((await mustGet(record.id)).replays).toEqual([
            { at: T0 + 1000, handledAt: T0 + 1500 },
            { at: T0 + 4000 },
          ]);
        });
      });

      describe('when the replay was made by someone whose name looks like JSON', () => {
        it('still marks the replay, and only it', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          const by = 'eve","handledAt":1}\n{"at":2';
          const record = await replayed(T0 + 1000, by);
          expect(await mark?.(record.id, T0 + 1500)).toBe(true);
          expect((await mustGet(record.id)).replays).toEqual([{ at: T0 + 1000, by, handledAt: T0 + 1500 }]);
        });
      });

      describe('when the record died again after its replay', () => {
        it('returns false and changes nothing', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          const record = await replayed(T0 + 1000);
          await store.add({ ...record, lastFailedAt: T0 + 2000 });
          const before = await mustGet(record.id);
          expect(await mark?.(record.id, T0 + 2500)).toBe(false);
          expect(await store.get(record.id)).toEqual(before);
          expect(before.status).toBe('dead');
        });
      });

      describe('when the record was never replayed', () => {
        it('returns false and changes nothing', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          const record = deadLetter();
          await store.add(record);
          expect(await mark?.(record.id, T0 + 1000)).toBe(false);
          expect(await store.get(record.id)).toEqual(record);
        });
      });

      describe('when no record has the id', () => {
        it('returns false and creates nothing', async ({ skip }) => {
          const mark = markReplayHandledOf(skip);
          expect(await mark?.(deadLetter().id, T0)).toBe(false);
          expect(await store.count({ status: 'any' })).toBe(0);
        });
      });
    });

    describe('.remove', () => {
      describe('when some ids exist', () => {
        it('deletes them and returns how many existed', async () => {
          const [a, b, c] = await addAll(deadLetter(), deadLetter(), deadLetter());
          expect(await store.remove([a.id, 'ffffffffffffffffffffffffffffffff', c.id])).toBe(2);
          expect(await store.get(a.id)).toBeUndefined();
          expect(await store.get(c.id)).toBeUndefined();
          expect(ids((await store.list({ status: 'any' })).records)).toEqual([b.id]);
        });

        it('deletes replayed records too', async () => {
          const record = deadLetter();
          await store.add(record);
          await store.markReplayed(record.id, { at: T0 + 1000 });
          expect(await store.remove([record.id])).toBe(1);
          expect(await store.count({ status: 'any' })).toBe(0);
        });

        it('counts an id given twice once', async () => {
          const record = deadLetter();
          await store.add(record);
          expect(await store.remove([record.id, record.id])).toBe(1);
        });
      });

      describe('when no id exists', () => {
        it('returns 0 and deletes nothing', async () => {
          await store.add(deadLetter());
          expect(await store.remove(['ffffffffffffffffffffffffffffffff'])).toBe(0);
          expect(await store.remove([])).toBe(0);
          expect(await store.count()).toBe(1);
        });
      });
    });

    describe('.purge', () => {
      describe('when no filter is given', () => {
        it('deletes the dead records, keeps the replayed ones, and returns how many it deleted', async () => {
          const [, b] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          expect(await store.purge()).toBe(2);
          expect(ids((await store.list({ status: 'any' })).records)).toEqual([b.id]);
        });
      });

      describe('when filtering by status any', () => {
        it('deletes every record', async () => {
          const [, b] = await addAll(deadLetter(), deadLetter(), deadLetter());
          await store.markReplayed(b.id, { at: T0 + 1000 });
          expect(await store.purge({ status: 'any' })).toBe(3);
          expect(await store.count({ status: 'any' })).toBe(0);
        });
      });

      describe('when filtering by a field', () => {
        it.each(FIELD_CASES)('deletes only the records whose $field matches', async ({ spec, filter }) => {
          const [a, , c] = await addAll(deadLetter(), deadLetter(spec), deadLetter(), deadLetter(spec));
          expect(await store.purge(filter)).toBe(2);
          expect(ids((await store.list()).records)).toEqual([a.id, c.id]);
        });
      });

      describe('when filtering by time', () => {
        it('deletes only the records whose last failure is before until', async () => {
          const [, b, c] = await addAll(
            deadLetter({ failedAt: T0 }),
            deadLetter({ failedAt: T0 + 1000 }),
            deadLetter({ failedAt: T0 + 2000 }),
          );
          expect(await store.purge({ until: T0 + 1000 })).toBe(1);
          expect(ids((await store.list()).records)).toEqual([b.id, c.id]);
        });
      });

      describe('when nothing matches', () => {
        it('returns 0 and deletes nothing', async () => {
          await addAll(deadLetter(), deadLetter());
          expect(await store.purge({ endpoint: 'nowhere' })).toBe(0);
          expect(await store.count()).toBe(2);
        });
      });
    });

    describe('.close', () => {
      describe('when the store is used afterwards', () => {
        it('rejects with HarrierError store-closed', async () => {
          const fixture = await factory();
          await fixture.cleanup?.();
          await fixture.store.close();
          expectCode(await failureOf(() => fixture.store.get('dl-missing')), 'store-closed');
          expectCode(await failureOf(() => fixture.store.add(deadLetter())), 'store-closed');
        });
      });

      describe('when the store is open', () => {
        it('resolves', async () => {
          const fixture = await factory();
          await fixture.store.add(deadLetter());
          await fixture.cleanup?.();
          await expect(fixture.store.close()).resolves.toBeUndefined();
        });
      });
    });
  });
}
