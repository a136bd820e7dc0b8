/**
 * `harrier/testing/conformance`: the vitest suites every `MessageBroker`, `EventLog`, `SagaStore`,
 * `CheckpointStore`, `DeadLetterStore`, `ScheduleStore` and `DeliveryLedger` must pass, for implementers of new ones.
 *
 * @remarks
 * These import vitest (an optional peer dependency of Harrier): install it to use this entry point.
 *
 * @packageDocumentation
 */
export {
  describeMessageBrokerConformance,
  type MessageBrokerUnderTest,
} from './message-broker-conformance.js';
export {
  describeDeadLetterStoreConformance,
  type DeadLetterStoreFactory,
  type DeadLetterStoreFixture,
} from './dead-letter-store-conformance.js';
export {
  describeEventLogConformance,
  type EventLogFactory,
  type EventLogFixture,
} from './event-log-conformance.js';
export {
  describeScheduleStoreConformance,
  type ScheduleStoreFactory,
  type ScheduleStoreFixture,
} from './schedule-store-conformance.js';
export {
  describeCheckpointStoreConformance,
  type CheckpointStoreFactory,
  type CheckpointStoreFixture,
} from './checkpoint-store-conformance.js';
export {
  describeSagaStoreConformance,
  type SagaStoreFactory,
  type SagaStoreFactoryOptions,
  type SagaStoreFixture,
} from './saga-store-conformance.js';
export {
  describeDeliveryLedgerConformance,
  type DeliveryLedgerFactory,
  type DeliveryLedgerFactoryOptions,
  type DeliveryLedgerFixture,
} from './delivery-ledger-conformance.js';
