import { randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { MAX_ATTEMPT_HISTORY, type AttemptRecord, type ErrorInfo } from '../../src/broker/message-broker.js';
import { buildDeadLetterRecord } from '../../src/dead-letters/dead-letter-record.js';
import { MAX_REPLAY_HISTORY, type DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import {
  RedisDeadLetterStore,
  type RedisDeadLetterStoreOptions,
} from '../../src/redis/redis-dead-letter-store.js';
import { startRedisServer, type LocalRedis } from '../helpers/local-redis.js';
import { deleteKeys, fillWithOtherKeys, scanKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const T0 = Date.UTC(2026, 0, 1);

/** A dead letter with a message id of its own, failed at `failedAt` on its third attempt. */
function deadLetter(messageId = uuidv7(), failedAt = T0): DeadLetterRecord {
  const error: ErrorInfo = {
    name: 'Error',
    message: 'boom',
    stack: 'Error: boom\n    at SendInvoice.handle (/app/src/billing/send-invoice.ts:12:11)',
  };
  return buildDeadLetterRecord({
    body: JSON.stringify({ v: 1, id: messageId, kind: 'event', type: 'orders.OrderPlaced', payload: {} }),
    facts: {
      messageId,
      kind: 'event',
      type: 'orders.OrderPlaced',
      endpoint: 'billing',
      handler: 'SendInvoice',
      attempt: 3,
      history: [
        { attempt: 1, at: failedAt - 2000, error },
        { attempt: 2, at: failedAt - 1000, error },
      ],
      partitionKey: undefined,
    },
    handler: 'SendInvoice',
    reason: 'handler-failed',
    error,
    ordered: false,
    now: failedAt,
  });
}

/** What a rejected promise rejected with, failing the test when it resolves. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected the promise to reject');
    },
    (error: unknown) => error,
  );
}

describe('RedisDeadLetterStore', () => {
  let admin: Redis;
  let prefix: string;
  let opened: RedisDeadLetterStore[];

  beforeAll(() => {
    admin = new Redis(redisUrl);
  });

  afterAll(async () => {
    await admin.quit();
  });

  beforeEach(() => {
    prefix = `{harrier-test-${randomUUID()}}`;
    opened = [];
  });

  afterEach(async () => {
    await Promise.all(opened.map((store) => store.close()));
    await deleteKeys(admin, prefix);
  });

  /** A store on this test's prefix, closed after the test. */
  function open(options: Partial<RedisDeadLetterStoreOptions> = {}): RedisDeadLetterStore {
    const store = new RedisDeadLetterStore({ connection: redisUrl, prefix, ...options });
    opened.push(store);
    return store;
  }

  /** How many record keys this test's prefix holds in Redis. */
  async function recordKeyCount(): Promise<number> {
    return (await scanKeys(admin, `${prefix}:dlq:record:*`)).length;
  }

  /**
   * A store on a client with a keyPrefix, capped at 2 records, after 3 adds: it lists the newest 2,
   * and `server` holds exactly 2 record keys under that keyPrefix.
   */
  async function trimsUnderKeyPrefix(url: string, server: Redis): Promise<void> {
    const keyPrefix = `${prefix}:kp:`;
    const client = new Redis(url, { keyPrefix });
    try {
      const store = open({ connection: client, prefix: '{harrier}', maxRecords: 2 });
      const records = [deadLetter(), deadLetter(), deadLetter()];
      for (const record of records) await store.add(record);
      expect((await store.list()).records).toEqual(records.slice(1));
      expect(await scanKeys(server, `${keyPrefix}{harrier}:dlq:record:*`)).toHaveLength(2);
    } finally {
      await client.quit();
    }
  }

  describe('constructor', () => {
    describe('when maxRecords is not a positive integer', () => {
      it('throws invalid-option', () => {
        for (const maxRecords of [0, -1, 1.5, Number.NaN]) {
          expect(() => new RedisDeadLetterStore({ connection: admin, prefix, maxRecords })).toThrow(
            expect.objectContaining({ code: 'invalid-option' }) as unknown,
          );
        }
      });
    });

    describe('when the prefix is empty', () => {
      it('throws invalid-option', () => {
        expect(() => new RedisDeadLetterStore({ connection: admin, prefix: '' })).toThrow(
          expect.objectContaining({ code: 'invalid-option' }) as unknown,
        );
      });
    });
  });

  describe('.add', () => {
    describe('when a record breaks the bounds of the record type', () => {
      it(`stores only the newest ${MAX_ATTEMPT_HISTORY} of 50 attempts`, async () => {
        const store = open();
        const base = deadLetter();
        const attempts: AttemptRecord[] = Array.from({ length: 50 }, (_, i) => ({
          attempt: i + 1,
          at: T0 + i,
          error: base.error,
        }));
        const returned = await store.add({ ...base, attempts, attemptCount: 50 });
        const stored = await store.get(base.id);
        expect(stored?.attempts).toEqual(attempts.slice(-MAX_ATTEMPT_HISTORY));
        expect(returned.attempts).toEqual(attempts.slice(-MAX_ATTEMPT_HISTORY));
        expect(stored?.attemptCount).toBe(50);
      });

      it('caps every stack at 4096 characters', async () => {
        const store = open();
        const base = deadLetter();
        const error: ErrorInfo = { name: 'Error', message: 'boom', stack: 'x'.repeat(10_000) };
        await store.add({ ...base, error, attempts: [{ attempt: 1, at: T0, error }] });
        const stored = await store.get(base.id);
        expect(stored?.error.stack).toBe('x'.repeat(4096));
        expect(stored?.attempts[0]?.error.stack).toBe('x'.repeat(4096));
      });

      it(`keeps only the newest ${MAX_REPLAY_HISTORY} replays of a new record`, async () => {
        const store = open();
        const replays = Array.from({ length: 30 }, (_, i) => ({ at: T0 + i, by: `run-${i}` }));
        const record = { ...deadLetter(), status: 'replayed' as const, replays };
        await store.add(record);
        expect((await store.get(record.id))?.replays).toEqual(replays.slice(-MAX_REPLAY_HISTORY));
      });
    });

    describe('when a new record would exceed maxRecords', () => {
      it('drops the oldest by first insertion, its key included', async () => {
        const store = open({ maxRecords: 3 });
        const records = [deadLetter(), deadLetter(), deadLetter(), deadLetter(), deadLetter()];
        for (const record of records) await store.add(record);
        const listed = (await store.list({ status: 'any' })).records.map((r) => r.id);
        expect(listed).toEqual(records.slice(2).map((r) => r.id));
        expect(await store.get(records[0]!.id)).toBeUndefined();
        expect(await recordKeyCount()).toBe(3);
        expect(await admin.zcard(`${prefix}:dlq:index`)).toBe(3);
      });
    });

    describe('when a record already held is updated at maxRecords', () => {
      it('drops nothing', async () => {
        const store = open({ maxRecords: 2 });
        const messageId = uuidv7();
        const [a, b] = [deadLetter(messageId), deadLetter()];
        await store.add(a);
        await store.add(b);
        await store.add(deadLetter(messageId, T0 + 60_000));
        expect((await store.list()).records.map((r) => r.id)).toEqual([a.id, b.id]);
      });
    });

    describe('when two stores add the same id at once', () => {
      it('keeps one record under that id', async () => {
        const [one, two] = [open(), open()];
        const messageId = uuidv7();
        const adds = Array.from({ length: 20 }, (_, i) =>
          (i % 2 === 0 ? one : two).add(deadLetter(messageId, T0 + i * 1000)),
        );
        await Promise.all(adds);
        expect(await one.count({ status: 'any' })).toBe(1);
        expect((await two.list({ status: 'any' })).records).toHaveLength(1);
        expect(await recordKeyCount()).toBe(1);
        expect(await admin.zcard(`${prefix}:dlq:index`)).toBe(1);
      });
    });
    describe('when the given client has a keyPrefix', () => {
      it('trims and lists under that keyPrefix', async () => {
        await trimsUnderKeyPrefix(redisUrl, admin);
      });

      describe('when the server holds 50,000 keys of other applications', () => {
        let crowded: LocalRedis;
        let crowdedAdmin: Redis;

        beforeAll(async () => {
          crowded = await startRedisServer('harrier-crowded-redis-');
          crowdedAdmin = new Redis(crowded.url);
          await fillWithOtherKeys(crowdedAdmin, 50_000);
        });

        afterAll(async () => {
          await crowdedAdmin.quit();
          crowded.stop();
        });

        it('trims and lists under that keyPrefix', async () => {
          await trimsUnderKeyPrefix(crowded.url, crowdedAdmin);
        });
      });
    });
  });

  describe('.list', () => {
    describe('when another store on the same prefix added the records', () => {
      it('returns them, replay state included, in first-insertion order', async () => {
        const first = open();
        const [a, b] = [deadLetter(), deadLetter()];
        await first.add(a);
        await first.add(b);
        await first.markReplayed(b.id, { at: T0 + 1000, by: 'alice' });
        await first.close();
        const second = open();
        const c = deadLetter();
        await second.add(c);
        expect((await second.list({ status: 'any' })).records).toEqual([
          a,
          { ...b, status: 'replayed', replays: [{ at: T0 + 1000, by: 'alice' }] },
          c,
        ]);
      });

      it('continues from a cursor the other store issued', async () => {
        const [first, second] = [open(), open()];
        const records = [deadLetter(), deadLetter(), deadLetter()];
        for (const record of records) await first.add(record);
        const page = await first.list({}, { limit: 2 });
        const rest = await second.list(
          {},
          { limit: 2, ...(page.next === undefined ? {} : { cursor: page.next }) },
        );
        expect(page.next).toBeDefined();
        expect(rest.records.map((r) => r.id)).toEqual([records[2]!.id]);
      });
    });

    describe('when Redis cannot be reached at the URL', () => {
      it('rejects within 3 s with redis-unavailable, naming REDIS_URL and --redis-url', async () => {
        const store = open({ connection: 'redis://127.0.0.1:1' });
        const started = performance.now();
        const error = await rejectionOf(store.list());
        expect(performance.now() - started).toBeLessThan(3000);
        expect(HarrierError.is(error)).toBe(true);
        expect(error).toMatchObject({ code: 'redis-unavailable' });
        const { message } = error as HarrierError;
        expect(message).toContain('Redis could not be reached at redis://127.0.0.1:1');
        expect(message).toContain('REDIS_URL');
        expect(message).toContain('--redis-url');
      });

      it('keeps the password out of the message', async () => {
        const store = open({ connection: 'redis://:s3cret@127.0.0.1:1' });
        const error = await rejectionOf(store.get('any'));
        expect(error).toMatchObject({ code: 'redis-unavailable' });
        expect((error as HarrierError).message).toContain('127.0.0.1:1');
        expect((error as HarrierError).message).not.toContain('s3cret');
      });
    });

    describe('when the given Cluster client cannot reach its cluster', () => {
      it('rejects with redis-unavailable, naming REDIS_CLUSTER and --redis-cluster', async () => {
        const client = new Cluster([{ host: '127.0.0.1', port: 1 }], {
          clusterRetryStrategy: () => null,
          redisOptions: { maxRetriesPerRequest: 1 },
        });
        client.on('error', () => undefined);
        try {
          const store = open({ connection: client });
          const error = await rejectionOf(store.list());
          expect(error).toMatchObject({ code: 'redis-unavailable' });
          expect((error as HarrierError).message).toContain('a Redis Cluster');
          expect((error as HarrierError).message).toContain('REDIS_CLUSTER / --redis-cluster');
        } finally {
          client.disconnect();
        }
      });
    });

    describe('when the given client cannot reach Redis', () => {
      it("rejects with redis-unavailable, naming the client's address", async () => {
        const client = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: 1 });
        client.on('error', () => undefined);
        try {
          const store = open({ connection: client });
          const error = await rejectionOf(store.list());
          expect(error).toMatchObject({ code: 'redis-unavailable' });
          expect((error as HarrierError).message).toContain('redis://127.0.0.1:1');
        } finally {
          client.disconnect();
        }
      });
    });
  });

  describe('.close', () => {
    describe('when the store was given a client', () => {
      it('leaves the client open', async () => {
        const client = new Redis(redisUrl);
        try {
          const store = new RedisDeadLetterStore({ connection: client, prefix });
          await store.add(deadLetter());
          await store.close();
          expect(await client.ping()).toBe('PONG');
        } finally {
          await client.quit();
        }
      });
    });

    describe('when the store is closed', () => {
      it('rejects later calls with store-closed and keeps the records in Redis', async () => {
        const store = open();
        const record = deadLetter();
        await store.add(record);
        await store.close();
        await expect(store.get(record.id)).rejects.toMatchObject({ code: 'store-closed' });
        expect(await open().get(record.id)).toEqual(record);
      });
    });
  });

  describe('.list with text', () => {
    describe('when the only match lies beyond what one page reads', () => {
      it('returns a short page with a cursor, and a later page finds the match', async () => {
        const store = open();
        const records = Array.from({ length: 12_000 }, () => deadLetter());
        for (let i = 0; i < records.length; i += 100) {
          await Promise.all(records.slice(i, i + 100).map((record) => store.add(record)));
        }
        const needle = { ...deadLetter(), error: { name: 'Error', message: 'needle in the haystack' } };
        await store.add(needle);
        const first = await store.list({ text: 'NEEDLE' }, { limit: 10 });
        expect(first.records).toEqual([]);
        expect(first.next).toBeDefined();
        const found: string[] = [];
        let cursor = first.next;
        while (cursor !== undefined) {
          const page = await store.list({ text: 'NEEDLE' }, { limit: 10, cursor });
          found.push(...page.records.map((r) => r.id));
          cursor = page.next;
        }
        expect(found).toEqual([needle.id]);
      }, 60_000);
    });
  });

  describe('.groups', () => {
    describe('when records are dropped at maxRecords', () => {
      it('drops them from their group too', async () => {
        const store = open({ maxRecords: 3 });
        for (let i = 0; i < 5; i++) await store.add(deadLetter(uuidv7(), T0 + i * 1000));
        const [group] = (await store.groups()).groups;
        expect(group).toMatchObject({ count: 3, firstSeen: T0, lastSeen: T0 + 4000 });
        expect(await store.count()).toBe(3);
      });
    });

    describe('when the given client has a keyPrefix', () => {
      it('keeps the aggregates under that keyPrefix', async () => {
        const keyPrefix = `${prefix}:kp:`;
        const client = new Redis(redisUrl, { keyPrefix });
        try {
          const store = open({ connection: client, prefix: '{harrier}' });
          const [a] = [deadLetter(), deadLetter()];
          await store.add(a);
          await store.add(deadLetter());
          await store.remove([a.id]);
          expect((await store.groups()).groups.map((g) => g.count)).toEqual([1]);
          expect(await admin.get(`${keyPrefix}{harrier}:dlq:grouped`)).toBe('1');
        } finally {
          await client.quit();
        }
      });
    });

    describe('when a record was written without aggregates (by an older Harrier)', () => {
      it('still counts it in groups and counts, by walking the records', async () => {
        const store = open();
        const current = deadLetter(uuidv7(), T0 + 5000);
        await store.add(current);
        const legacy = deadLetter(uuidv7(), T0);
        const { firstFailedAt, status, replays: _replays, ...rest } = legacy;
        await admin.hset(`${prefix}:dlq:record:${legacy.id}`, {
          data: JSON.stringify(rest),
          first: String(firstFailedAt),
          status,
          replays: '',
          v: '1',
        });
        await admin.zadd(`${prefix}:dlq:index`, 0, legacy.id);
        expect(await store.count()).toBe(2);
        expect(await store.count({ fingerprint: legacy.fingerprint })).toBe(2);
        expect((await store.groups()).groups).toMatchObject([
          { fingerprint: legacy.fingerprint, count: 2, firstSeen: firstFailedAt, lastSeen: T0 + 5000 },
        ]);
      });
    });
  });
});
