import { InMemoryBroker } from '../../src/broker/in-memory-broker.js';
import { describeMessageBrokerConformance } from '../../src/testing/message-broker-conformance.js';

describeMessageBrokerConformance('InMemoryBroker', async () => ({ broker: new InMemoryBroker() }));

describeMessageBrokerConformance('InMemoryBroker (shuffled)', async () => ({
  broker: new InMemoryBroker({ deliveryOrder: 'shuffled' }),
}));
