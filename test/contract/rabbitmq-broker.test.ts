import { afterAll } from 'vitest';
import { dropChannelOf, RabbitMqBroker } from '../../src/rabbitmq/rabbitmq-broker.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { deleteRabbitMqPrefix, freshRabbitMqPrefix, rabbitMqUrl } from '../helpers/rabbitmq.js';

const filePrefix = freshRabbitMqPrefix();
let tests = 0;

afterAll(async () => {
  await deleteRabbitMqPrefix(filePrefix);
}, 60_000);

describeMessageBrokerConformance('RabbitMqBroker', () => {
  // Each test its own prefix: its own exchanges and queues on the shared server.
  const options = { connection: rabbitMqUrl, prefix: `${filePrefix}-${String(++tests)}`, partitions: 4 };
  const broker = new RabbitMqBroker(options);
  return Promise.resolve({
    broker,
    // A second process on the same server and prefix.
    sibling: () => Promise.resolve(new RabbitMqBroker(options)),
    // The channel that took the delivery closes, as if its process died: RabbitMQ puts the message
    // back, and the quorum queue counts the return in x-delivery-count.
    abandon: (delivery) => dropChannelOf(broker, delivery.id),
  });
});
