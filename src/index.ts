import 'reflect-metadata';

export {
  DuplicateHandlerError,
  HandlerNotFoundError,
  HarrierError,
  MessageValidationError,
  StaleDeliveryError,
  UnknownTopicError,
  UnrecoverableError,
} from './errors/index.js';
export { ManualClock, systemClock } from './clock/index.js';
export type { Clock } from './clock/index.js';
export { consoleLogger, silentLogger } from './logging/index.js';
export type { LogFields, Logger } from './logging/index.js';
export {
  DEFAULT_MAX_ENVELOPE_BYTES,
  ENVELOPE_VERSION,
  decodeEnvelope,
  defineCommand,
  defineEvent,
  defineQuery,
  deterministicUuidV7,
  encodeEnvelope,
  encodedSize,
  envelopeMetaSchema,
  envelopeSchema,
  fnv1a64,
  isMessageDefinition,
  partitionOf,
  isUuidV7,
  uuidV7Time,
  uuidv7,
} from './messages/index.js';
export type {
  BackoffOptions,
  CommandDefinition,
  CommandOptions,
  DecodeFailure,
  DecodeFailureReason,
  DecodeOptions,
  DecodeResult,
  DecodeSuccess,
  DefinitionOptions,
  Envelope,
  EnvelopeMeta,
  EventDefinition,
  EventOptions,
  InputOf,
  MessageDefinition,
  MessageKind,
  PartitionKeyOption,
  PayloadOf,
  QueryDefinition,
  QueryOptions,
  ResultOf,
  RetryOptions,
} from './messages/index.js';
export { InMemoryBroker, MAX_ATTEMPT_HISTORY, toErrorInfo } from './broker/index.js';
export type {
  AttemptRecord,
  Delivery,
  DeliveryFacts,
  ErrorInfo,
  InMemoryBrokerOptions,
  InMemoryBrokerStats,
  MessageBroker,
  NackOptions,
  OutgoingMessage,
  ReceiverOptions,
  RedeliveryTarget,
  SubscriptionSpec,
} from './broker/index.js';
export {
  CommandHandler,
  EventHandler,
  HandlerRegistry,
  On,
  Projection,
  QueryHandler,
  getHandlerMetadata,
} from './handlers/index.js';
export type {
  HandlerClass,
  HandlerEntry,
  HandlerKind,
  HandlerMetadata,
  HandlerOptions,
  HandlerRoute,
  HandlesCommand,
  HandlesEvent,
  HandlesQuery,
  MessageContext,
  SendOptions,
} from './handlers/index.js';
export {
  DEFAULT_RETRY,
  Dispatcher,
  HandlerContext,
  backoffDelay,
  composeMiddleware,
  isPermanent,
  prepareMessage,
  resolveRetryPolicy,
} from './dispatch/index.js';
export type {
  CausingMessage,
  DeadLetteredEvent,
  DispatchHooks,
  DispatcherOptions,
  EnvelopeEncoder,
  EnvelopeVerifier,
  HandledEvent,
  HandlerInvoker,
  HandlerOutcome,
  Middleware,
  MiddlewareContext,
  PreparedMessage,
  RetryPolicy,
  RetryingEvent,
  StopOptions,
} from './dispatch/index.js';
export { HarrierTokens, createBus, createContainerInvoker } from './bus/index.js';
export type { BusOptions, MessageBus, MessageScopeOptions, ScheduleOptions } from './bus/index.js';
export {
  InMemoryDeadLetterStore,
  MAX_REPLAY_HISTORY,
  buildDeadLetterRecord,
  deadLetterId,
  fingerprintOf,
  replayDeadLetters,
} from './dead-letters/index.js';
export type {
  DeadLetterFilter,
  DeadLetterInput,
  DeadLetterPage,
  DeadLetterPageOptions,
  DeadLetterReason,
  DeadLetterRecord,
  DeadLetterStatus,
  DeadLetterStore,
  InMemoryDeadLetterStoreOptions,
  ReplayDeadLettersOptions,
  ReplayErrorCode,
  ReplayFailure,
  ReplayRecord,
  ReplayResult,
  ReplaySuccess,
} from './dead-letters/index.js';
export {
  InMemoryCheckpointStore,
  InMemoryEventLog,
  checkPartition,
  checkSchema,
  indexTopics,
  partitionFor,
  topicInfo,
  topicOf,
} from './log/index.js';
export type {
  AppendAck,
  AppendInput,
  Checkpoint,
  CheckpointStore,
  EventLog,
  InMemoryEventLogOptions,
  LogCapabilities,
  LogRecord,
  MaintenanceOptions,
  SubscribeOptions,
  TopicInfo,
  TopicSpec,
} from './log/index.js';
export { ProjectionRunner } from './projections/index.js';
export type {
  PartitionStatus,
  PoisonPolicy,
  ProjectionRunnerOptions,
  ProjectionStatus,
  ResettableProjection,
} from './projections/index.js';
