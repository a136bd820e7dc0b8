import { beforeAll } from 'vitest';
import { dropChannelOf, RabbitMqBroker } from '../../src/rabbitmq/rabbitmq-broker.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { freshRabbitPrefix, rabbitmqUrl } from '../helpers/rabbitmq.js';

// A broker prefix has no '.': the helper's `harrier-test-<hex>.` without its last character.
const filePrefix = freshRabbitPrefix().slice(0, -1);
let tests = 0;

// The global setup's server may still be booting.
beforeAll(() => rabbitmqUrl(), 60_000);

describeMessageBrokerConformance('RabbitMqBroker', async () => {
  // Each test its own prefix: its own exchanges and queues on the tests' server.
  const options = {
    connection: await rabbitmqUrl(),
    prefix: `${filePrefix}-${String(++tests)}`,
    partitions: 4,
  };
  const broker = new RabbitMqBroker(options);
  return {
    broker,
    // A second process on the same server and prefix.
    sibling: () => Promise.resolve(new RabbitMqBroker(options)),
    // The channel that took the delivery closes, as if its process died: RabbitMQ puts the message
    // back, and the quorum queue counts the return in x-delivery-count.
    abandon: (delivery) => dropChannelOf(broker, delivery.id),
  };
});
