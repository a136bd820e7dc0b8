import { inject } from 'vitest';
import { RedisSagaStore } from '../../src/redis/redis-saga-store.js';
import { describeSagaStoreConformance } from '../../src/testing/saga-store-conformance.js';
import { useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

/** Shared by the fixtures: deletes what each test left behind, and is the client given to a store. */
const redis = useSharedRedis(redisUrl);

describeSagaStoreConformance('RedisSagaStore (from a URL)', ({ completedRetentionMs }) =>
  redis.withFreshPrefix((prefix) => ({
    store: new RedisSagaStore({
      connection: redisUrl,
      prefix,
      ...(completedRetentionMs === undefined ? {} : { completedRetentionMs }),
    }),
  })),
);

// Run against the shared client too: a store that quit a client it was given would fail every later test.
describeSagaStoreConformance('RedisSagaStore (given a client)', ({ completedRetentionMs }) =>
  redis.withFreshPrefix((prefix) => ({
    store: new RedisSagaStore({
      connection: redis.client,
      prefix,
      ...(completedRetentionMs === undefined ? {} : { completedRetentionMs }),
    }),
  })),
);
