/** The broker conformance suite on RabbitMqBroker with a RedisDeliveryLedger. */
import { beforeAll, inject } from 'vitest';
import { RedisDeliveryLedger } from '../../src/redis/redis-delivery-ledger.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { rabbitBrokersUnderTest } from '../helpers/rabbitmq-conformance.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { useSharedRedis } from '../helpers/redis.js';

const redis = useSharedRedis(inject('redisUrl'));
const underTest = rabbitBrokersUnderTest();

// The global setup's server may still be booting.
beforeAll(async () => {
  await rabbitmqUrl();
}, 60_000);

describeMessageBrokerConformance('RabbitMqBroker with a RedisDeliveryLedger', async () => {
  const { cleanup, prefix } = await redis.withFreshPrefix((p) => ({ prefix: p }));
  return underTest(new RedisDeliveryLedger({ connection: redis.client, prefix }), cleanup);
});
