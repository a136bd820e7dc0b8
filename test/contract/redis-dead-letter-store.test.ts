import { inject } from 'vitest';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { describeDeadLetterStoreConformance } from '../../src/testing/dead-letter-store-conformance.js';
import { useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

/** Shared by the fixtures: deletes what each test left behind, and is the client given to a store. */
const redis = useSharedRedis(redisUrl);

describeDeadLetterStoreConformance('RedisDeadLetterStore (from a URL)', () =>
  redis.withFreshPrefix((prefix) => ({
    store: new RedisDeadLetterStore({ connection: redisUrl, prefix }),
  })),
);

// Run against the shared client too: a store that quit a client it was given would fail every later test.
describeDeadLetterStoreConformance('RedisDeadLetterStore (given a client)', () =>
  redis.withFreshPrefix((prefix) => ({
    store: new RedisDeadLetterStore({ connection: redis.client, prefix }),
  })),
);
