/**
 * The broker conformance suite on RabbitMqBroker without a ledger. RabbitMQ cannot look into a
 * queue: a replay of a message the subscription still holds adds a copy, so the suite's replay tests
 * need the ledger. This run skips them as on a broker without `redeliver` (everything else runs);
 * test/integration/rabbitmq-broker.test.ts covers the replay without a ledger, and docs/rabbitmq.md
 * says why.
 */
import { beforeAll } from 'vitest';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { rabbitBrokersUnderTest, withoutRedeliverCapability } from '../helpers/rabbitmq-conformance.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';

const underTest = rabbitBrokersUnderTest();

// The global setup's server may still be booting.
beforeAll(async () => {
  await rabbitmqUrl();
}, 60_000);

describeMessageBrokerConformance('RabbitMqBroker without a ledger (replays not checked)', async () => {
  const made = await underTest(undefined, () => Promise.resolve());
  return { ...made, broker: withoutRedeliverCapability(made.broker) };
});
