export {
  MAX_ATTEMPT_HISTORY,
  toErrorInfo,
  type AttemptRecord,
  type BrokerCapabilities,
  type Delivery,
  type DeliveryFacts,
  type ErrorInfo,
  type MessageBroker,
  type NackOptions,
  type OutgoingMessage,
  type PendingDeadLetter,
  type QueueDepth,
  type ReceiverOptions,
  type RedeliveryTarget,
  type SubscriptionSpec,
} from './message-broker.js';
export {
  InMemoryBroker,
  type DeliveryOrder,
  type InMemoryBrokerOptions,
  type InMemoryBrokerStats,
} from './in-memory-broker.js';
export { noRouteError } from './no-route-error.js';
export { QUEUE_SEPARATOR, commandQueue, subscriptionQueue } from './queue-names.js';
export { SETTLED } from './settled.js';
export { sumQueueDepths } from './sum-queue-depths.js';
export { parseAttemptHistory, parsePendingDeadLetter, type ParsedHistory } from './delivery-facts.js';
export {
  DEFAULT_SCHEDULED_RETENTION_MS,
  createPublishToken,
  type AdmitVerdict,
  type DeliveryLedger,
  type DeliveryLedgerOptions,
  type LedgerCopy,
  type LedgerSettlement,
  type LostCopy,
  type OutageLoss,
  type ReplaceOutcome,
} from './delivery-ledger.js';
export { InMemoryDeliveryLedger } from './in-memory-delivery-ledger.js';
