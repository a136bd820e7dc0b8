import { afterAll, beforeAll, inject } from 'vitest';
import type { DeliveryLedger } from '../../src/broker/delivery-ledger.js';
import type { BrokerCapabilities, MessageBroker } from '../../src/broker/message-broker.js';
import { silentLogger } from '../../src/logging/logger.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresDeliveryLedger } from '../../src/postgres/postgres-delivery-ledger.js';
import {
  dropChannelOf,
  RabbitMqBroker,
  type RabbitMqBrokerOptions,
} from '../../src/rabbitmq/rabbitmq-broker.js';
import { RedisDeliveryLedger } from '../../src/redis/redis-delivery-ledger.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import type { MessageBrokerUnderTest } from '../../src/testing/message-broker-conformance.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { freshRabbitPrefix, rabbitmqUrl } from '../helpers/rabbitmq.js';
import { useSharedRedis } from '../helpers/redis.js';

// A broker prefix has no '.': the helper's `harrier-test-<hex>.` without its last character.
const filePrefix = freshRabbitPrefix().slice(0, -1);
let tests = 0;

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);
const { pool } = useSharedPostgres(inject('databaseUrl'));
// One migrated schema for the file: every test has message ids and queues of its own.
const schema = freshSchema();

// The global setup's server may still be booting.
beforeAll(async () => {
  await rabbitmqUrl();
  await migratePostgres(pool, { schema });
}, 60_000);

afterAll(async () => {
  await dropSchema(pool, schema);
});

/** A broker with a prefix of its own, a sibling on the same prefix and ledger, and `abandon`. */
async function underTest(
  ledger: DeliveryLedger | undefined,
  cleanup: () => Promise<void>,
): Promise<MessageBrokerUnderTest & { broker: RabbitMqBroker }> {
  const options: RabbitMqBrokerOptions = {
    connection: await rabbitmqUrl(),
    prefix: `${filePrefix}-${String(++tests)}`,
    partitions: 4,
    logger: silentLogger,
    ...(ledger !== undefined ? { ledger } : {}),
  };
  const broker = new RabbitMqBroker(options);
  return {
    broker,
    // A second process on the same server, prefix and ledger.
    sibling: () => Promise.resolve(new RabbitMqBroker(options)),
    // The channel that took the delivery closes, as if its process died: RabbitMQ puts the message
    // back, and the quorum queue counts the return in x-delivery-count.
    abandon: (delivery) => dropChannelOf(broker, delivery.id),
    cleanup: async () => {
      await ledger?.close();
      await cleanup();
    },
  };
}

describeMessageBrokerConformance('RabbitMqBroker with a RedisDeliveryLedger', async () => {
  const { cleanup, prefix } = await redis.withFreshPrefix((p) => ({ prefix: p }));
  return underTest(new RedisDeliveryLedger({ connection: redis.client, prefix }), cleanup);
});

describeMessageBrokerConformance('RabbitMqBroker with a PostgresDeliveryLedger', () =>
  underTest(new PostgresDeliveryLedger({ connection: pool, schema }), () => Promise.resolve()),
);

/**
 * Without a ledger, RabbitMQ cannot look into a queue: a replay of a message the subscription still
 * holds adds a copy, so the suite's replay tests need the ledger. This run skips them as on a broker
 * without `redeliver` (everything else runs); test/integration/rabbitmq-broker.test.ts covers the
 * replay without a ledger, and docs/rabbitmq.md says why.
 */
describeMessageBrokerConformance('RabbitMqBroker without a ledger (replays not checked)', async () => {
  const made = await underTest(undefined, () => Promise.resolve());
  return { ...made, broker: withoutRedeliverCapability(made.broker) };
});

/** `broker`, its `capabilities().redeliver` false. */
function withoutRedeliverCapability(broker: RabbitMqBroker): MessageBroker {
  return new Proxy(broker, {
    get(target, property): unknown {
      if (property === 'capabilities') {
        return (): BrokerCapabilities => ({ ...target.capabilities(), redeliver: false });
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
