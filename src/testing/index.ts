export {
  createTestBus,
  type CapturedMessage,
  type TestBus,
  type TestBusOptions,
  type WhenIdleOptions,
} from './test-bus.js';
export { describeMessageBrokerConformance } from './message-broker-conformance.js';
export { describeDeadLetterStoreConformance } from './dead-letter-store-conformance.js';
export {
  describeEventLogConformance,
  type EventLogFactory,
  type EventLogFixture,
} from './event-log-conformance.js';
export {
  describeCheckpointStoreConformance,
  type CheckpointStoreFactory,
  type CheckpointStoreFixture,
} from './checkpoint-store-conformance.js';
