import { InMemoryBroker, type InMemoryBrokerOptions } from '../../src/broker/in-memory-broker.js';
import {
  describeMessageBrokerConformance,
  type MessageBrokerUnderTest,
} from '../../src/testing/message-broker-conformance.js';
import { sideBySide } from '../helpers/side-by-side.js';

/** A fresh broker, whose `abandon` gives a delivery up as a dead worker would. */
function underTest(options: InMemoryBrokerOptions = {}): MessageBrokerUnderTest {
  const broker = new InMemoryBroker(options);
  return {
    broker,
    abandon: (delivery) => {
      broker.abandon(delivery.id);
      return Promise.resolve();
    },
  };
}

// Both suites only wait on timers, each on brokers of its own.
sideBySide('InMemoryBroker', {
  'in publish order': () => {
    describeMessageBrokerConformance('InMemoryBroker', async () => underTest());
  },
  shuffled: () => {
    describeMessageBrokerConformance('InMemoryBroker (shuffled)', async () =>
      underTest({ deliveryOrder: 'shuffled' }),
    );
  },
});
