import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import type { ErrorInfo } from '../../src/broker/message-broker.js';
import { buildDeadLetterRecord } from '../../src/dead-letters/dead-letter-record.js';
import type {
  DeadLetterFilter,
  DeadLetterGroup,
  DeadLetterRecord,
  DeadLetterStore,
} from '../../src/dead-letters/dead-letter-store.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const T0 = Date.UTC(2026, 0, 1);
/** The fields the add script keeps beside a record's JSON for the filter scan. */
const FILTER_FIELDS = ['x', 'x:ep', 'x:type', 'x:hd', 'x:rs'];

interface Shape {
  readonly endpoint?: string;
  readonly type?: string | undefined;
  readonly handler?: string | undefined;
  readonly reason?: string;
  readonly message?: string;
  readonly stack?: string;
  readonly payload?: unknown;
  readonly at?: number;
  readonly name?: string;
}

/** A dead letter of the given shape, with a message id of its own. */
function deadLetter(shape: Shape = {}): DeadLetterRecord {
  const messageId = uuidv7();
  const at = shape.at ?? T0;
  const type = 'type' in shape ? shape.type : 'orders.OrderPlaced';
  const handler = 'handler' in shape ? shape.handler : 'SendInvoice';
  const error: ErrorInfo = {
    name: shape.name ?? 'Error',
    message: shape.message ?? 'boom',
    stack:
      shape.stack ?? `Error: boom\n    at ${handler ?? 'X'}.handle (/app/src/${handler ?? 'x'}.ts:12:11)`,
  };
  return buildDeadLetterRecord({
    body: JSON.stringify({ v: 1, id: messageId, kind: 'event', type, payload: shape.payload ?? {} }),
    facts: {
      messageId,
      kind: 'event',
      type,
      endpoint: shape.endpoint ?? 'billing',
      handler,
      attempt: 1,
      history: [],
      partitionKey: undefined,
    },
    handler,
    reason: shape.reason ?? 'handler-failed',
    error,
    ordered: false,
    now: at,
  });
}

/** Every record `filter` selects, over all pages (a text search may end pages early). */
async function listAll(store: DeadLetterStore, filter: DeadLetterFilter): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.list(filter, cursor === undefined ? { limit: 3 } : { limit: 3, cursor });
    ids.push(...page.records.map((record) => record.id));
    cursor = page.next;
  } while (cursor !== undefined);
  return ids;
}

/** Every group `filter` selects, over all pages. */
async function groupsAll(store: DeadLetterStore, filter: DeadLetterFilter): Promise<DeadLetterGroup[]> {
  const groups: DeadLetterGroup[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.groups!(filter, cursor === undefined ? { limit: 2 } : { limit: 2, cursor });
    groups.push(...page.groups);
    cursor = page.next;
  } while (cursor !== undefined);
  return groups;
}

describe('RedisDeadLetterStore', () => {
  let admin: Redis;
  let prefix: string;
  let store: RedisDeadLetterStore;

  beforeAll(() => {
    admin = new Redis(redisUrl);
  });

  afterAll(async () => {
    await admin.quit();
  });

  beforeEach(() => {
    prefix = `{harrier-test-${randomUUID()}}`;
    store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
  });

  afterEach(async () => {
    await store.close();
    await deleteKeys(admin, prefix);
  });

  const recordKey = (id: string): string => `${prefix}:dlq:record:${id}`;

  /** Deletes a record's filter fields, as a Harrier from before them wrote it. */
  async function makeLegacy(id: string): Promise<void> {
    expect(await admin.hdel(recordKey(id), ...FILTER_FIELDS)).toBeGreaterThan(0);
  }

  describe('filter fields', () => {
    describe('when a record is added, updated, replayed, removed and purged', () => {
      it('keeps the fields the filter reads in step', async () => {
        const record = deadLetter({ endpoint: 'billing', type: 'orders.OrderPlaced' });
        await store.add(record);
        expect(await admin.hmget(recordKey(record.id), ...FILTER_FIELDS)).toEqual([
          '1',
          'billing',
          'orders.OrderPlaced',
          'SendInvoice',
          'handler-failed',
        ]);
        expect(await store.count({ endpoint: 'billing' })).toBe(1);

        // An update replaces every field, and a type that became unknown is no longer matched.
        await store.add({ ...record, endpoint: 'shipping', type: undefined, reason: 'malformed' });
        expect(await admin.hget(recordKey(record.id), 'x:type')).toBeNull();
        expect(await store.count({ endpoint: 'billing' })).toBe(0);
        expect(await store.count({ type: 'orders.OrderPlaced' })).toBe(0);
        expect(await store.count({ endpoint: 'shipping', reason: 'malformed' })).toBe(1);

        await store.markReplayed(record.id, { at: T0 + 1 });
        expect(await store.count({ endpoint: 'shipping' })).toBe(0);
        expect(await store.count({ endpoint: 'shipping', status: 'replayed' })).toBe(1);
        expect((await store.groups({ endpoint: 'shipping', status: 'any' })).groups).toMatchObject([
          { count: 1 },
        ]);

        expect(await store.remove([record.id])).toBe(1);
        expect(await store.count({ endpoint: 'shipping', status: 'any' })).toBe(0);

        const other = deadLetter({ endpoint: 'shipping' });
        await store.add(other);
        expect(await store.purge({ endpoint: 'shipping' })).toBe(1);
        expect(await store.count({ endpoint: 'shipping', status: 'any' })).toBe(0);
        expect(await store.list({ endpoint: 'shipping', status: 'any' })).toEqual({
          records: [],
          next: undefined,
        });
      });
    });

    describe('when records were written before the filter fields (by an older Harrier)', () => {
      it('still selects them by every filter, and an update gives them the fields', async () => {
        const legacy = deadLetter({ endpoint: 'billing', at: T0 });
        const current = deadLetter({ endpoint: 'billing', at: T0 + 1000 });
        const elsewhere = deadLetter({ endpoint: 'shipping', at: T0 + 2000 });
        for (const record of [legacy, current, elsewhere]) await store.add(record);
        await makeLegacy(legacy.id);

        expect(await store.count({ endpoint: 'billing' })).toBe(2);
        expect(await listAll(store, { endpoint: 'billing' })).toEqual([legacy.id, current.id]);
        expect(await listAll(store, { until: T0 + 500 })).toEqual([legacy.id]);
        expect(await store.count({ text: 'BOOM', endpoint: 'billing' })).toBe(2);
        expect(await groupsAll(store, { endpoint: 'billing' })).toMatchObject([
          { fingerprint: legacy.fingerprint, count: 2, firstSeen: T0, lastSeen: T0 + 1000 },
        ]);

        await store.add(legacy);
        expect(await admin.hget(recordKey(legacy.id), 'x:ep')).toBe('billing');
        expect(await store.count({ endpoint: 'billing' })).toBe(2);
      });
    });
  });

  describe('.count, .list and .groups with filters applied in Redis', () => {
    /** Records that tell the filters apart, one of them written before the filter fields. */
    async function fillVaried(): Promise<DeadLetterRecord[]> {
      const records = [
        deadLetter({ endpoint: 'billing', at: T0 }),
        deadLetter({ endpoint: 'shipping', type: 'orders.OrderShipped', at: T0 + 1000 }),
        deadLetter({
          endpoint: 'billing',
          type: undefined,
          handler: undefined,
          reason: 'unknown-type',
          at: T0 + 2000,
        }),
        deadLetter({ endpoint: 'billing', type: '', handler: 'Audit', reason: 'malformed', at: T0 + 3000 }),
        deadLetter({
          endpoint: 'shipping',
          handler: 'Audit',
          message: 'Card DECLINED by bank',
          at: T0 + 4000,
        }),
        deadLetter({ endpoint: 'billing', payload: { note: 'say "hi"', city: 'Zürich' }, at: T0 + 5000 }),
        // JavaScript lower-cases the KELVIN SIGN to "k"; Lua's lower() does not.
        deadLetter({ endpoint: 'billing', message: 'temperature 300 \u212A', at: T0 + 6000 }),
        // Only the handler and stack frame say "ledger": a text search must not find it by the handler.
        deadLetter({ endpoint: 'billing', handler: 'LedgerWriter', stack: 'Error: boom', at: T0 + 7000 }),
        deadLetter({ endpoint: 'shipping', name: 'TypeError', message: 'x is undefined', at: T0 + 8000 }),
      ];
      for (const record of records) await store.add(record);
      await store.markReplayed(records[1]!.id, { at: T0 + 9000 });
      await makeLegacy(records[4]!.id);
      return records;
    }

    const filters: DeadLetterFilter[] = [
      { endpoint: 'billing' },
      { endpoint: 'shipping', status: 'any' },
      { endpoint: 'shipping', status: 'replayed' },
      { type: 'orders.OrderPlaced' },
      { type: '' },
      { handler: 'Audit' },
      { handler: 'Audit', endpoint: 'shipping' },
      { reason: 'unknown-type' },
      { since: T0 + 2000 },
      { until: T0 + 2000, status: 'any' },
      { since: T0 + 1000, until: T0 + 5000 },
      { text: 'declined' },
      { text: 'DECLINED', endpoint: 'billing' },
      { text: 'say \\"hi\\"' },
      { text: '"hi"' },
      { text: 'zürich' },
      { text: 'ZÜRICH' },
      { text: '300 k' },
      { text: 'ledger' },
      { text: 'ledgerwriter' },
      { text: '' },
      { text: 'typeerror', status: 'any' },
      { fingerprint: 'nope', endpoint: 'billing' },
    ];

    it.each(filters.map((filter) => [JSON.stringify(filter), filter] as const))(
      'selects what matchesDeadLetterFilter selects for %s',
      async (_name, filter) => {
        const records = await fillVaried();
        const reference = new InMemoryDeadLetterStore();
        for (const record of records) await reference.add(record);
        await reference.markReplayed(records[1]!.id, { at: T0 + 9000 });

        const expected = await listAll(reference, filter);
        expect(await listAll(store, filter)).toEqual(expected);
        expect(await store.count(filter)).toBe(expected.length);
        const groups = await groupsAll(store, filter);
        expect(
          groups.map(({ fingerprint, count, firstSeen, lastSeen }) => ({
            fingerprint,
            count,
            firstSeen,
            lastSeen,
          })),
        ).toEqual(
          (await groupsAll(reference, filter)).map(({ fingerprint, count, firstSeen, lastSeen }) => ({
            fingerprint,
            count,
            firstSeen,
            lastSeen,
          })),
        );
      },
    );

    describe('when the selected records span many script runs', () => {
      it('sums groups across runs and shows the latest record of each', async () => {
        const records = Array.from({ length: 2500 }, (_, i) =>
          deadLetter({
            endpoint: i % 2 === 0 ? 'billing' : 'shipping',
            handler: `Handler${i % 3}`,
            message: `refused ${i}`,
            at: T0 + i * 1000,
          }),
        );
        // The first add alone, so every later one finds its script loaded and lands in array order.
        await store.add(records[0]!);
        for (let i = 1; i < records.length; i += 250) {
          await Promise.all(records.slice(i, i + 250).map((record) => store.add(record)));
        }
        const filter: DeadLetterFilter = { text: 'REFUSED', endpoint: 'billing' };
        expect(await store.count(filter)).toBe(1250);
        const groups = await groupsAll(store, filter);
        expect(groups.map((g) => g.count).reduce((a, b) => a + b, 0)).toBe(1250);
        for (const group of groups) {
          const mine = records.filter((r, i) => i % 2 === 0 && r.fingerprint === group.fingerprint);
          const latest = mine.at(-1)!;
          expect(group).toEqual({
            fingerprint: group.fingerprint,
            count: mine.length,
            firstSeen: mine[0]!.firstFailedAt,
            lastSeen: latest.lastFailedAt,
            type: latest.type,
            handler: latest.handler,
            endpoint: 'billing',
            reason: latest.reason,
            sampleError: latest.error.message,
          });
        }
      }, 60_000);
    });
  });
});
