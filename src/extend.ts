/**
 * `harrier/extend`: what implementers of a `MessageBroker`, an `EventLog`, a `CheckpointStore` or a
 * `DeadLetterStore` need beyond `harrier`, and the pipeline parts for wiring a dispatcher by hand.
 *
 * @remarks
 * Applications import `harrier` only. The contracts themselves (`MessageBroker`, `EventLog`, ...)
 * and the errors they throw (`HarrierError`, `StaleDeliveryError`, `UnknownTopicError`) are exported
 * from `harrier`; this entry point holds their helper types and functions: delivery facts, the
 * envelope codec, topic checks, dead-letter records, the dispatcher and handler registry. Each name
 * has one home, so nothing here is also exported from `harrier`.
 *
 * @packageDocumentation
 */
import 'reflect-metadata';

export {
  ENVELOPE_VERSION,
  createEnvelopeSigner,
  decodeEnvelope,
  deterministicUuidV7,
  encodeEnvelope,
  encodedSize,
  envelopeMetaSchema,
  envelopeSchema,
  fnv1a64,
  isMessageDefinition,
  isUuidV7,
  partitionOf,
  prepareMessage,
  uuidV7Time,
} from './messages/index.js';
export type {
  CausingMessage,
  DecodeFailure,
  DecodeFailureReason,
  DecodeOptions,
  DecodeResult,
  DecodeSuccess,
  EnvelopeSigner,
  PreparedMessage,
} from './messages/index.js';
export {
  DEFAULT_SCHEDULED_RETENTION_MS,
  InMemoryDeliveryLedger,
  MAX_ATTEMPT_HISTORY,
  QUEUE_SEPARATOR,
  SETTLED,
  commandQueue,
  createPublishToken,
  noRouteError,
  parseAttemptHistory,
  parsePendingDeadLetter,
  subscriptionQueue,
  sumQueueDepths,
  toErrorInfo,
} from './broker/index.js';
export type {
  AdmitVerdict,
  BrokerCapabilities,
  Delivery,
  DeliveryFacts,
  DeliveryLedger,
  DeliveryLedgerOptions,
  LedgerCopy,
  LedgerSettlement,
  LostCopy,
  NackOptions,
  OutageLoss,
  OutgoingMessage,
  ParsedHistory,
  PendingDeadLetter,
  QueueDepth,
  ReceiverOptions,
  RedeliveryTarget,
  ReplaceOutcome,
  SubscriptionSpec,
} from './broker/index.js';
export { HandlerRegistry, getHandlerMetadata } from './handlers/index.js';
export type {
  HandlerEntry,
  HandlerKind,
  HandlerMetadata,
  HandlerRoute,
  OnMethodDescriptor,
} from './handlers/index.js';
export {
  Dispatcher,
  HandlerContext,
  HandlerPipeline,
  MessagePublisher,
  OutageBreaker,
  ReceivedHandlerContext,
  backoffDelay,
  composeMiddleware,
  isPermanent,
  resolveOutageOptions,
  resolveRetryPolicy,
} from './dispatch/index.js';
export type {
  AbandonedOutcome,
  DeadLetterOutcome,
  DispatcherOptions,
  HandledOutcome,
  HandlerInvoker,
  HandlerPipelineOptions,
  MessagePublisherOptions,
  OutageListener,
  PausedOutcome,
  PipelineInput,
  PipelineOutcome,
  PipelineStep,
  PublishOptions,
  RetryOutcome,
  RetryPolicy,
  StepResult,
  StepRunner,
  LogPosition,
  TransactionalUnitOfWork,
  UnitOfWorkBus,
  UnitOfWorkCall,
  UnitOfWorkResult,
} from './dispatch/index.js';
export { createContainerInvoker, type ContainerInvoker } from './bus/index.js';
export {
  MAX_REPLAY_HISTORY,
  buildDeadLetterRecord,
  deadLetterId,
  fingerprintOf,
  matchesDeadLetterFilter,
  parseDeadLetterRecord,
  replayDeadLetters,
  selectsEveryDeadLetter,
} from './dead-letters/index.js';
export type {
  DeadLetterInput,
  ParsedDeadLetterRecord,
  ProjectionReplayer,
  ReplayDeadLettersOptions,
} from './dead-letters/index.js';
export { checkPartition, checkSchema, indexTopics, partitionFor, topicInfo, topicOf } from './log/index.js';
export type {
  AppendAck,
  AppendInput,
  Checkpoint,
  LogCapabilities,
  LogRecord,
  MaintenanceOptions,
  SubscribeOptions,
} from './log/index.js';
export { checkpointLags, lagBehind } from './projections/index.js';
export type { CheckpointLagSource, ProjectionRunnerOptions } from './projections/index.js';
export { subscriptionDeadLetters, withTransport } from './admin/index.js';
export {
  DEFAULT_SAGA_PAGE_LIMIT,
  compareSagaPositions,
  completedRetentionOf,
  decodeSagaCursor,
  encodeSagaCursor,
  sagaPageLimit,
  serializeSagaWrite,
} from './sagas/index.js';
export type { SagaCursorPosition, SerializedSagaWrite } from './sagas/index.js';
