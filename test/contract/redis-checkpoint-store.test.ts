import type { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { RedisCheckpointStore } from '../../src/redis/redis-checkpoint-store.js';
import { describeCheckpointStoreConformance } from '../../src/testing/checkpoint-store-conformance.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

/** Shared by the fixtures: deletes what each test left behind, and is the client given to a store. */
const redis = useSharedRedis(redisUrl);

describeCheckpointStoreConformance('RedisCheckpointStore (from a URL)', () =>
  redis.withFreshPrefix((prefix) => ({
    store: new RedisCheckpointStore({ connection: redisUrl, prefix }),
  })),
);

// Run against the shared client too: a store that quit a client it was given would fail every later test.
describeCheckpointStoreConformance('RedisCheckpointStore (given a client)', () =>
  redis.withFreshPrefix((prefix) => ({
    store: new RedisCheckpointStore({ connection: redis.client, prefix }),
  })),
);

/** The error `action` rejects with; fails the test when it succeeds. */
async function failureOf(action: () => Promise<unknown>): Promise<unknown> {
  try {
    await action();
  } catch (error) {
    return error;
  }
  return expect.fail('expected a rejection, but the call succeeded');
}

describe(RedisCheckpointStore, () => {
  const T0 = Date.UTC(2026, 0, 1);
  let prefix = freshPrefix();
  const stores: RedisCheckpointStore[] = [];

  function open(connection: string | Redis = redisUrl): RedisCheckpointStore {
    const store = new RedisCheckpointStore({ connection, prefix });
    stores.push(store);
    return store;
  }

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
    await deleteKeys(redis.client, prefix);
    prefix = freshPrefix();
  });

  describe('.commit', () => {
    describe('when another store on the prefix committed', () => {
      it('sees its checkpoint and never lowers it', async () => {
        const a = open();
        const b = open(redis.client);
        await a.commit('totals', 'orders', 0, 7, T0);
        expect(await b.get('totals', 'orders', 0)).toBe(7);
        expect(await b.commit('totals', 'orders', 0, 3, T0 + 1)).toBe(7);
        expect(await a.list()).toEqual([
          { projection: 'totals', topic: 'orders', partition: 0, offset: 7, updatedAt: T0 },
        ]);
      });
    });

    describe('when the store is closed', () => {
      it('rejects with HarrierError store-closed', async () => {
        const store = open();
        await store.close();
        expect(await failureOf(() => store.commit('totals', 'orders', 0, 1, T0))).toHaveProperty(
          'code',
          'store-closed',
        );
      });
    });

    describe('when Redis cannot be reached', () => {
      it('rejects with HarrierError redis-unavailable', async () => {
        const store = open('redis://127.0.0.1:1');
        expect(await failureOf(() => store.commit('totals', 'orders', 0, 1, T0))).toHaveProperty(
          'code',
          'redis-unavailable',
        );
      });
    });
  });

  describe('.list', () => {
    describe('when names hold "|" and ":" and a projection is called "projections"', () => {
      it('keeps topics, partitions and projections apart', async () => {
        const store = open();
        await store.commit('projections', 'a|1', 2, 5, T0);
        await store.commit('x:y', 'a', 12, 6, T0 + 1);
        expect(await store.list()).toEqual([
          { projection: 'projections', topic: 'a|1', partition: 2, offset: 5, updatedAt: T0 },
          { projection: 'x:y', topic: 'a', partition: 12, offset: 6, updatedAt: T0 + 1 },
        ]);
        expect(await store.lowest('a|1', 2)).toBe(5);
      });
    });
  });
});
