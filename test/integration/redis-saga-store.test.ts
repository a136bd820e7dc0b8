import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { RedisSagaStore } from '../../src/redis/redis-saga-store.js';
import type { SagaWrite } from '../../src/sagas/saga-store.js';
import { expectCode, failureOf } from '../../src/testing/expect-code.js';
import { startRedisServer, type LocalRedis } from '../helpers/local-redis.js';
import { RAISED, runVersion1ThenVersion2 } from '../helpers/saga-state-versions.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);

const T0 = Date.UTC(2026, 0, 1);
const DAY = 24 * 60 * 60 * 1000;

function write(id: string, fields: Partial<SagaWrite> = {}): SagaWrite {
  return { saga: 'fulfilment', id, state: { n: 1 }, status: 'active', timeouts: [], now: T0, ...fields };
}

describe(RedisSagaStore, () => {
  let prefix = freshPrefix();
  const stores: RedisSagaStore[] = [];

  function open(options: { completedRetentionMs?: number; connection?: string } = {}): RedisSagaStore {
    const store = new RedisSagaStore({ connection: redis.client, prefix, ...options });
    stores.push(store);
    return store;
  }

  const instanceKey = (saga: string, id: string): string => `${prefix}:saga:i:${saga.length}:${saga}:${id}`;

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
    await deleteKeys(redis.client, prefix);
    prefix = freshPrefix();
  });

  describe('.save', () => {
    describe('when the instance completes', () => {
      it('sets the key to expire after completedRetentionMs, and an active save clears it', async () => {
        const store = open({ completedRetentionMs: 2 * DAY });
        await store.save(write('o-1'), 0);
        const key = instanceKey('fulfilment', 'o-1');
        expect(await redis.client.pttl(key)).toBe(-1);

        await store.save(write('o-1', { status: 'completed' }), 1);
        const ttl = await redis.client.pttl(key);
        expect(ttl).toBeGreaterThan(2 * DAY - 60_000);
        expect(ttl).toBeLessThanOrEqual(2 * DAY);

        await store.save(write('o-1'), 2);
        expect(await redis.client.pttl(key)).toBe(-1);
      });

      it('uses 7 days by default', async () => {
        const store = open();
        await store.save(write('o-1', { status: 'completed' }), 0);
        const ttl = await redis.client.pttl(instanceKey('fulfilment', 'o-1'));
        expect(ttl).toBeGreaterThan(7 * DAY - 60_000);
        expect(ttl).toBeLessThanOrEqual(7 * DAY);
      });
    });

    describe('when two stores on the prefix save the same version', () => {
      it('lets one win', async () => {
        const a = open();
        const b = open({ connection: redisUrl });
        await a.save(write('o-1'), 0);
        const results = await Promise.allSettled([
          a.save(write('o-1', { state: { by: 'a' } }), 1),
          b.save(write('o-1', { state: { by: 'b' } }), 1),
        ]);
        expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        expect((await b.get('fulfilment', 'o-1'))?.version).toBe(2);
      });
    });
  });

  describe('.list', () => {
    describe('when more index entries than one scan chunk have expired', () => {
      it('skips them, removes them from the index, and drops the emptied saga name', async () => {
        const store = open();
        for (let i = 0; i < 450; i++) await store.save(write(`gone-${String(i).padStart(3, '0')}`), 0);
        await store.save(write('live'), 0);
        await store.save(write('x-1', { saga: 'other' }), 0);
        // As if their retention ran out: the keys vanish, the index entries stay behind.
        const doomed = Array.from({ length: 450 }, (_, i) =>
          instanceKey('fulfilment', `gone-${String(i).padStart(3, '0')}`),
        );
        await redis.client.del(...doomed);
        await redis.client.del(instanceKey('other', 'x-1'));

        const page = await store.list({}, { limit: 10 });
        expect(page.instances.map((i) => `${i.saga}/${i.id}`)).toEqual(['fulfilment/live']);
        expect(page.next).toBeUndefined();
        expect(await redis.client.zrange(`${prefix}:saga:index:fulfilment`, '0', '-1')).toEqual(['live']);
        expect(await redis.client.smembers(`${prefix}:saga:names`)).toEqual(['fulfilment']);
      });
    });
    describe('when the instances hold many large applied steps', () => {
      // A server of its own: the test counts the bytes the server sent, all clients together.
      let server: LocalRedis;
      let client: Redis;
      beforeAll(async () => {
        server = await startRedisServer('harrier-saga-bytes-');
        client = new Redis(server.url);
      });
      afterAll(async () => {
        await client.quit();
        server.stop();
      });

      it('reads neither their applied steps nor more instances than the page needs', async () => {
        const store = new RedisSagaStore({ connection: client, prefix });
        // 64 steps of 4 KB each: 256 KB per instance, 52 MB over 200 instances.
        const body = 'x'.repeat(4096);
        const applied = Array.from({ length: 64 }, (_, n) => ({
          message: `m-${n}`,
          outgoing: [{ id: `out-${n}`, kind: 'event' as const, type: 'a.B', body }],
          at: T0,
        }));
        for (let batch = 0; batch < 200; batch += 20) {
          await Promise.all(
            Array.from({ length: 20 }, (_, i) =>
              store.save(write(`o-${String(batch + i).padStart(3, '0')}`, { applied }), 0),
            ),
          );
        }
        const sent = async (): Promise<number> =>
          Number(/total_net_output_bytes:(\d+)/.exec(await client.info('stats'))?.[1]);

        const before = await sent();
        const page = await store.list({ saga: 'fulfilment' }, { limit: 1 });
        const after = await sent();
        expect(page.instances.map((i) => i.id)).toEqual(['o-000']);
        expect(page.instances[0]).not.toHaveProperty('applied');
        expect(page.next).toBeDefined();
        expect(after - before).toBeLessThan(2 * 1024 * 1024);
        expect((await store.get('fulfilment', 'o-000'))?.applied).toHaveLength(64);
        await store.close();
      });
    });
  });

  describe('when the given client has a keyPrefix', () => {
    it('lists the instances it saved under that keyPrefix', async () => {
      const client = new Redis(redisUrl, { keyPrefix: `${prefix}:kp:` });
      try {
        const store = new RedisSagaStore({ connection: client });
        await store.save(write('o-1'), 0);
        await store.save(write('o-2', { status: 'completed' }), 0);
        const { instances } = await store.list({ saga: 'fulfilment' });
        expect(instances.map((i) => i.id)).toEqual(['o-1', 'o-2']);
        expect(await redis.client.pttl(`${prefix}:kp:{harrier}:saga:i:10:fulfilment:o-2`)).toBeGreaterThan(0);
        await store.close();
      } finally {
        await client.quit();
      }
    });
  });

  describe('the instance hash', () => {
    it('keeps the applied steps in a field of their own, beside a state field holding only the state', async () => {
      const store = open();
      const applied = [
        { message: 'm-1', outgoing: [{ id: 'x', kind: 'event' as const, type: 'a.B', body: '{}' }] },
      ];
      await store.save(write('o-1', { state: { paid: true }, applied }), 0);
      const key = instanceKey('fulfilment', 'o-1');
      expect(JSON.parse((await redis.client.hget(key, 'state')) ?? '')).toEqual({ paid: true });
      expect(JSON.parse((await redis.client.hget(key, 'applied')) ?? '')).toEqual(applied);
    });

    it('reads a hash without the applied field as no applied steps', async () => {
      const store = open();
      await store.save(write('o-1', { applied: [{ message: 'm-1', outgoing: [] }] }), 0);
      await redis.client.hdel(instanceKey('fulfilment', 'o-1'), 'applied');
      expect((await store.get('fulfilment', 'o-1'))?.applied).toEqual([]);
    });

    it('keeps the state version in a field of its own, and reads a hash without it as version 1', async () => {
      const store = open();
      await store.save(write('o-1', { stateVersion: 2 }), 0);
      const key = instanceKey('fulfilment', 'o-1');
      expect(await redis.client.hget(key, 'stateVersion')).toBe('2');
      // As an instance saved before the field existed.
      await redis.client.hdel(key, 'stateVersion');
      expect((await store.get('fulfilment', 'o-1'))?.stateVersion).toBe(1);
      expect((await store.list({ saga: 'fulfilment' })).instances.map((i) => i.stateVersion)).toEqual([1]);
    });
  });

  describe('a saga whose state changed shape', () => {
    it('raises a state saved by version 1 of the saga with the upcaster of version 2, which runs its step on it', async () => {
      const run = await runVersion1ThenVersion2(open(), 'o-1');
      expect(run.afterV1).toMatchObject(RAISED.afterV1);
      expect(run.afterV2).toMatchObject(RAISED.afterV2);
      expect(run.deadLetters).toBe(0);
    });
  });

  describe("when the stored JSON is not Harrier's", () => {
    it('rejects with saga-corrupt naming the key', async () => {
      const store = open();
      await store.save(write('o-1'), 0);
      await redis.client.hset(instanceKey('fulfilment', 'o-1'), 'state', '{not json');
      const error = await failureOf(() => store.get('fulfilment', 'o-1'));
      expectCode(error, 'saga-corrupt');
      expect(String(error)).toContain(instanceKey('fulfilment', 'o-1'));
    });
  });

  describe('when Redis cannot be reached', () => {
    it('rejects with redis-unavailable', async () => {
      const store = open({ connection: 'redis://127.0.0.1:1' });
      expectCode(await failureOf(() => store.save(write('o-1'), 0)), 'redis-unavailable');
    });
  });

  describe('new RedisSagaStore', () => {
    it('refuses a retention that is not a positive whole number with invalid-option', () => {
      for (const completedRetentionMs of [0, -1, 1.5]) {
        expect(() => new RedisSagaStore({ connection: redisUrl, completedRetentionMs })).toThrow(
          expect.objectContaining({ code: 'invalid-option' }),
        );
      }
    });
  });
});
