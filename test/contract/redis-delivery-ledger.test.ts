import { inject } from 'vitest';
import { RedisDeliveryLedger } from '../../src/redis/redis-delivery-ledger.js';
import { describeDeliveryLedgerConformance } from '../../src/testing/delivery-ledger-conformance.js';
import { useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);

describeDeliveryLedgerConformance('RedisDeliveryLedger (from a URL)', (options) =>
  redis.withFreshPrefix((prefix) => ({
    ledger: new RedisDeliveryLedger({ ...options, connection: redisUrl, prefix }),
  })),
);

// A ledger that quit a client it was given would fail every later test.
describeDeliveryLedgerConformance('RedisDeliveryLedger (given a client)', (options) =>
  redis.withFreshPrefix((prefix) => ({
    ledger: new RedisDeliveryLedger({ ...options, connection: redis.client, prefix }),
  })),
);
