import { inject } from 'vitest';
import { RedisScheduleStore } from '../../src/redis/redis-schedule-store.js';
import { describeScheduleStoreConformance } from '../../src/testing/schedule-store-conformance.js';
import { useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);

describeScheduleStoreConformance('RedisScheduleStore (from a URL)', () =>
  redis.withFreshPrefix((prefix) => ({ store: new RedisScheduleStore({ connection: redisUrl, prefix }) })),
);

// A store that quit a client it was given would fail every later test.
describeScheduleStoreConformance('RedisScheduleStore (given a client)', () =>
  redis.withFreshPrefix((prefix) => ({
    store: new RedisScheduleStore({ connection: redis.client, prefix }),
  })),
);
