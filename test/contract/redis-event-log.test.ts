import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import type { AppendInput, LogRecord, TopicSpec } from '../../src/log/event-log.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RedisEventLog } from '../../src/redis/redis-event-log.js';
import { describeEventLogConformance } from '../../src/testing/event-log-conformance.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

/** Shared by the fixtures: deletes what each test left behind, and is the client given to a log. */
const redis = useSharedRedis(redisUrl);

describeEventLogConformance('RedisEventLog (from a URL)', (topics) =>
  redis.withFreshPrefix((prefix) => ({
    log: new RedisEventLog({ connection: redisUrl, topics, prefix }),
    reopen: () => Promise.resolve(new RedisEventLog({ connection: redisUrl, topics, prefix })),
  })),
);

// Run against the shared client too: a log that quit a client it was given would fail every later test.
describeEventLogConformance('RedisEventLog (given a client)', (topics) =>
  redis.withFreshPrefix((prefix) => ({
    log: new RedisEventLog({ connection: redis.client, topics, prefix }),
    reopen: () => Promise.resolve(new RedisEventLog({ connection: redis.client, topics, prefix })),
  })),
);

function input(key: string): AppendInput {
  const id = uuidv7();
  const type = 'test.ThingHappened';
  return { id, key, type, body: JSON.stringify({ v: 1, id, kind: 'event', type, payload: {} }) };
}

/** The error `action` rejects with; fails the test when it succeeds. */
async function failureOf(action: () => Promise<unknown>): Promise<unknown> {
  try {
    await action();
  } catch (error) {
    return error;
  }
  return expect.fail('expected a rejection, but the call succeeded');
}

describe(RedisEventLog, () => {
  const RETENTION_MS = 60_000;
  let prefix: string;
  const logs: RedisEventLog[] = [];

  /** A log on this test's prefix over `topics`, closed after the test. */
  function open(topics: readonly TopicSpec[], connection: string | Redis = redisUrl): RedisEventLog {
    const log = new RedisEventLog({ connection, topics, prefix });
    logs.push(log);
    return log;
  }

  beforeAll(() => {
    prefix = freshPrefix();
  });

  afterEach(async () => {
    for (const log of logs.splice(0)) await log.close();
    await deleteKeys(redis.client, prefix);
    prefix = freshPrefix();
  });

  describe('constructor', () => {
    describe('when the prefix is empty', () => {
      it('throws HarrierError invalid-option', () => {
        expect(() => new RedisEventLog({ connection: redis.client, topics: [], prefix: '' })).toThrow(
          expect.objectContaining({ code: 'invalid-option' }) as Error,
        );
      });
    });

    describe('when pollIntervalMs is not a positive whole number', () => {
      it('throws HarrierError invalid-option', () => {
        expect(() => new RedisEventLog({ connection: redis.client, topics: [], pollIntervalMs: 0 })).toThrow(
          expect.objectContaining({ code: 'invalid-option' }) as Error,
        );
      });
    });
  });

  describe('.append', () => {
    describe('when two logs on one prefix append at once', () => {
      it('gives dense offsets without duplicates or gaps', async () => {
        const topics = [{ name: 'orders', partitions: 1 }];
        const a = open(topics);
        const b = open(topics);
        const acks = await Promise.all(
          Array.from({ length: 200 }, (_, i) => (i % 2 === 0 ? a : b).append('orders', input('k'))),
        );
        expect(acks.map((ack) => ack.offset).sort((x, y) => x - y)).toEqual(
          Array.from({ length: 200 }, (_, i) => i),
        );
        expect(await a.endOffset('orders', 0)).toBe(200);
      });
    });

    describe('when a uid is appended at once by two logs', () => {
      it('lands it once and gives both the same ack', async () => {
        const topics = [{ name: 'orders', partitions: 1 }];
        const a = open(topics);
        const b = open(topics);
        const uid = `uid-${randomUUID()}`;
        const [first, second] = await Promise.all([
          a.appendIdempotent('orders', uid, input('k')),
          b.appendIdempotent('orders', uid, input('k')),
        ]);
        expect([first.duplicate, second.duplicate].sort()).toEqual([false, true]);
        expect({ ...first, duplicate: false }).toEqual({ ...second, duplicate: false });
        expect(await a.endOffset('orders', 0)).toBe(1);
      });
    });

    describe('when Redis cannot be reached', () => {
      it('rejects with HarrierError redis-unavailable', async () => {
        const log = open([{ name: 'orders', partitions: 1 }], 'redis://127.0.0.1:1');
        const error = await failureOf(() => log.append('orders', input('k')));
        expect(HarrierError.is(error)).toBe(true);
        expect(error).toHaveProperty('code', 'redis-unavailable');
      });
    });

    describe('when a stored ack is not JSON', () => {
      it('rejects with HarrierError log-corrupt, as FileEventLog does for its damaged files', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        const uid = `uid-${randomUUID()}`;
        await redis.client.hset(`${prefix}:log:uids`, uid, 'not json');
        const error = await failureOf(() => log.appendIdempotent('orders', uid, input('k')));
        expect(HarrierError.is(error, 'log-corrupt')).toBe(true);
        expect(error).toHaveProperty('code', 'log-corrupt');
      });
    });

    describe('when many appends are made at once', () => {
      it('lands them in call order per partition, a repeated uid once', async () => {
        const log = open([{ name: 'orders', partitions: 2 }]);
        const uid = `uid-${randomUUID()}`;
        const records = Array.from({ length: 600 }, (_, i) => input(`k${i % 7}`));
        const acks = await Promise.all([
          ...records.map((record) => log.append('orders', record)),
          log.appendIdempotent('orders', uid, input('k')),
          log.appendIdempotent('orders', uid, input('k')),
        ]);
        const [first, again] = acks.slice(-2);
        expect(again).toEqual({ ...first, duplicate: true });
        for (const partition of [0, 1]) {
          const ids = records.filter((_, i) => acks[i]?.partition === partition).map((r) => r.id);
          const uidAcks = first?.partition === partition ? 1 : 0;
          const stored = await log.read('orders', partition, 0, 1000);
          expect(stored.filter((record) => record.uid === undefined).map((record) => record.id)).toEqual(ids);
          expect(stored.map((record) => record.offset)).toEqual(stored.map((_, i) => i));
          expect(await log.endOffset('orders', partition)).toBe(ids.length + uidAcks);
        }
      });
    });

    describe('when Redis refuses the write of one partition', () => {
      it('fails that append alone and leaves no gap in the offsets', async () => {
        const log = open([{ name: 'orders', partitions: 16 }]);
        // 'foobar' is in partition 8 of 16, 'k' is not.
        await redis.client.set(`${prefix}:log:orders:8`, 'not a stream');
        const [refused, landed] = await Promise.allSettled([
          log.append('orders', input('foobar')),
          log.append('orders', input('k')),
        ]);
        expect(refused).toMatchObject({ status: 'rejected', reason: { code: 'redis-command-failed' } });
        expect(landed).toMatchObject({ status: 'fulfilled', value: { offset: 0 } });
        await redis.client.del(`${prefix}:log:orders:8`);
        expect(await log.append('orders', input('foobar'))).toMatchObject({ partition: 8, offset: 0 });
        expect(await log.endOffset('orders', 8)).toBe(1);
      });
    });

    describe('when the log closes right after an append', () => {
      // Not loaded, as after a Redis restart or a SCRIPT FLUSH: the batch goes EVALSHA, NOSCRIPT, EVAL.
      it.each([
        ['loaded', false],
        ['not loaded', true],
      ])('still lands the append, the script %s', async (_, flush) => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        // Connected first: an append still waiting for the connection fails on close, as any command does.
        expect(await log.endOffset('orders', 0)).toBe(0);
        if (flush) await redis.client.script('FLUSH');
        const record = input('k');
        const appended = log.append('orders', record);
        await log.close();
        expect(await appended).toMatchObject({ offset: 0, id: record.id });
      });
    });

    describe('when the uid is the empty string', () => {
      it('lands it once and returns the first ack again', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        const first = await log.appendIdempotent('orders', '', input('k'));
        const again = await log.appendIdempotent('orders', '', input('k'));
        expect(again).toEqual({ ...first, duplicate: true });
        expect(await log.endOffset('orders', 0)).toBe(1);
      });
    });

    describe('when a retry whose body fails the schema is made in the tick of the first append', () => {
      it('returns the first ack', async () => {
        const schema = z.object({ n: z.number() });
        const log = open([{ name: 'orders', partitions: 1, schema }]);
        const uid = `uid-${randomUUID()}`;
        const id = uuidv7();
        const type = 'test.ThingHappened';
        const body = (payload: unknown): string => JSON.stringify({ v: 1, id, kind: 'event', type, payload });
        const [first, again] = await Promise.allSettled([
          log.appendIdempotent('orders', uid, { id, key: 'k', type, body: body({ n: 1 }) }),
          log.appendIdempotent('orders', uid, { id, key: 'k', type, body: body({ n: 'one' }) }),
        ]);
        expect(first.status).toBe('fulfilled');
        expect(again).toEqual({
          status: 'fulfilled',
          value: { ...((first as PromiseFulfilledResult<unknown>).value as object), duplicate: true },
        });
      });
    });

    describe('when the appends of one tick carry more than one JavaScript string holds', () => {
      it('lands them', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        const uid = `uid-${randomUUID()}`;
        const id = uuidv7();
        const type = 'test.ThingHappened';
        // 130 retries of a 4.2 MB record: 546 M characters, above V8's string limit (2^29 - 24),
        // while only the first lands, so Redis keeps a single record.
        const payload = { pad: 'x'.repeat(4_200_000) };
        const record = {
          id,
          key: 'k',
          type,
          body: JSON.stringify({ v: 1, id, kind: 'event', type, payload }),
        };
        const acks = await Promise.all(
          Array.from({ length: 130 }, () => log.appendIdempotent('orders', uid, record)),
        );
        expect(acks.filter((ack) => !ack.duplicate)).toHaveLength(1);
        expect(await log.endOffset('orders', 0)).toBe(1);
      });
    });

    describe('when a read is made in the tick of an append', () => {
      it('sees the append', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        // The script loaded first: a NOSCRIPT fallback sends its EVAL after the reads, as it always has.
        await log.append('orders', input('k'));
        const uid = `uid-${randomUUID()}`;
        const record = input('k');
        const [ack, found, end, stored] = await Promise.all([
          log.appendIdempotent('orders', uid, record),
          log.findByUid(uid),
          log.endOffset('orders', 0),
          log.getEvent(record.id),
        ]);
        expect(found).toEqual({ ...ack, duplicate: false });
        expect(end).toBe(2);
        expect(stored).toMatchObject({ id: record.id, offset: 1 });
      });
    });

    describe('when the log is closed', () => {
      it('rejects with HarrierError log-closed', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        await log.close();
        const error = await failureOf(() => log.append('orders', input('k')));
        expect(error).toHaveProperty('code', 'log-closed');
      });
    });
  });

  describe('.read', () => {
    describe('when max is above maxReadBatch', () => {
      it('returns at most maxReadBatch records', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        const batch = log.capabilities().maxReadBatch;
        const pipeline = redis.client.pipeline();
        // Filled directly: appending 10001 records one by one would take a while.
        for (let offset = 0; offset <= batch; offset++) {
          pipeline.xadd(`${prefix}:log:orders:0`, `${offset + 1}-0`, 'id', `e${offset}`, 'at', '0');
        }
        pipeline.set(`${prefix}:log:orders:0:next`, batch + 1);
        await pipeline.exec();
        const records = await log.read('orders', 0, 0, batch + 100);
        expect(records).toHaveLength(batch);
        expect(records.at(-1)?.offset).toBe(batch - 1);
      });
    });

    describe('when max or fromOffset is invalid', () => {
      it('rejects with HarrierError invalid-argument', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        expect(await failureOf(() => log.read('orders', 0, -1, 10))).toHaveProperty(
          'code',
          'invalid-argument',
        );
        expect(await failureOf(() => log.read('orders', 0, 0, 0))).toHaveProperty('code', 'invalid-argument');
      });
    });
  });

  describe('.subscribe', () => {
    describe('when the history is longer than one batch', () => {
      it('yields all of it in order, then live appends', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        const ids: string[] = [];
        for (let i = 0; i < 2500; i += 250) {
          const chunk = Array.from({ length: 250 }, () => input('k'));
          await Promise.all(chunk.map((record) => log.append('orders', record)));
          ids.push(...chunk.map((record) => record.id));
        }
        const controller = new AbortController();
        const seen: LogRecord[] = [];
        const live = input('k');
        for await (const record of log.subscribe('orders', { partition: 0, signal: controller.signal })) {
          seen.push(record);
          if (seen.length === ids.length) await log.append('orders', live);
          if (seen.length === ids.length + 1) controller.abort();
        }
        expect(seen.map((record) => record.offset)).toEqual(Array.from({ length: 2501 }, (_, i) => i));
        expect(new Set(seen.slice(0, 2500).map((record) => record.id))).toEqual(new Set(ids));
        expect(seen.at(-1)?.id).toBe(live.id);
      });
    });

    describe('when another log on the prefix appends', () => {
      it('yields its records as they are appended', async () => {
        const topics = [{ name: 'orders', partitions: 1 }];
        const reader = open(topics);
        const writer = open(topics, redis.client);
        const iterator = reader.subscribe('orders', { partition: 0 })[Symbol.asyncIterator]();
        const next = iterator.next();
        const record = input('k');
        await writer.append('orders', record);
        expect((await next).value).toMatchObject({ offset: 0, id: record.id });
        await iterator.return?.();
      });
    });

    describe('when its connection is killed', () => {
      it('reconnects and goes on yielding records', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        const iterator = log.subscribe('orders', { partition: 0 })[Symbol.asyncIterator]();
        const before = input('k');
        await log.append('orders', before);
        expect((await iterator.next()).value).toMatchObject({ offset: 0, id: before.id });
        const waiting = iterator.next();
        const name = `${prefix}:log:orders:0:subscriber`;
        const clients = (await redis.client.client('LIST')) as string;
        const line = clients.split('\n').find((entry) => entry.includes(` name=${name} `));
        const id = /^id=(\d+) /.exec(line ?? '')?.[1];
        expect(id, `a client named ${name}`).toBeDefined();
        expect(await redis.client.client('KILL', 'ID', id ?? '')).toBe(1);
        const after = input('k');
        await log.append('orders', after);
        expect((await waiting).value).toMatchObject({ offset: 1, id: after.id });
        await iterator.return?.();
      });
    });

    describe('when the log closes', () => {
      it('ends a subscription that is waiting for records', async () => {
        const log = open([{ name: 'orders', partitions: 1 }]);
        const iterator = log.subscribe('orders', { partition: 0 })[Symbol.asyncIterator]();
        const next = iterator.next();
        await log.append('orders', input('k'));
        expect((await next).done).toBe(false);
        const waiting = iterator.next();
        await log.close();
        expect((await waiting).done).toBe(true);
      });
    });
  });

  describe('.maintenance', () => {
    const expired = (): number => Date.now() + RETENTION_MS + 1_000;

    describe('when more records expired than one chunk holds', () => {
      it('removes all of them and drops them from the id index', async () => {
        const log = open([{ name: 'orders', partitions: 1, retentionMs: RETENTION_MS }]);
        const records = Array.from({ length: 2100 }, () => input('k'));
        for (let i = 0; i < records.length; i += 300) {
          await Promise.all(records.slice(i, i + 300).map((record) => log.append('orders', record)));
        }
        expect(await log.maintenance(expired())).toBe(2100);
        expect(await log.read('orders', 0, 0, 10)).toEqual([]);
        expect(await log.getEvent(records[0]?.id ?? '')).toBeUndefined();
        expect(await redis.client.hlen(`${prefix}:log:ids`)).toBe(0);
        expect(await log.endOffset('orders', 0)).toBe(2100);
      });
    });

    describe('when an idempotent record expired', () => {
      it('keeps its uid: a retry still returns the first ack', async () => {
        const log = open([{ name: 'orders', partitions: 1, retentionMs: RETENTION_MS }]);
        const uid = `uid-${randomUUID()}`;
        const first = await log.appendIdempotent('orders', uid, input('k'));
        expect(await log.maintenance(expired())).toBe(1);
        expect(await log.findByUid(uid)).toEqual(first);
        expect(await log.appendIdempotent('orders', uid, input('k'))).toEqual({ ...first, duplicate: true });
        expect(await log.endOffset('orders', 0)).toBe(1);
      });
    });

    describe('when an event id was appended twice and its first record expired', () => {
      it('keeps the id index of neither copy pointing at a removed record', async () => {
        const log = open([{ name: 'orders', partitions: 1, retentionMs: RETENTION_MS }]);
        const record = input('k');
        await log.append('orders', record);
        await log.append('orders', record);
        expect((await log.getEvent(record.id))?.offset).toBe(0);
        expect(await log.maintenance(expired(), { keepFrom: () => Promise.resolve(1) })).toBe(1);
        expect(await log.getEvent(record.id)).toBeUndefined();
        expect((await log.read('orders', 0, 0, 10)).map((r) => r.offset)).toEqual([1]);
      });
    });
  });
});
