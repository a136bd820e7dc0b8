/**
 * `harrier`: what an application imports to define messages, write handlers and run a bus.
 *
 * @remarks
 * Implementers of brokers, event logs and stores import `harrier/extend` as well (the contract
 * helpers, delivery facts, codec and pipeline internals); tests import `harrier/testing`, and
 * conformance suites for a new implementation `harrier/testing/conformance`. Each name has one home.
 *
 * @packageDocumentation
 */
import 'reflect-metadata';

export {
  DuplicateHandlerError,
  HARRIER_ERROR_CODES,
  HARRIER_ERROR_CODE_ALIASES,
  HandlerNotFoundError,
  HarrierError,
  MessageValidationError,
  SagaConflictError,
  StaleDeliveryError,
  TransientError,
  UnknownTopicError,
  UnrecoverableError,
} from './errors/index.js';
export type { HarrierErrorCode, HarrierErrorCodeAlias } from './errors/index.js';
export { ManualClock, systemClock } from './clock/index.js';
export type { Clock } from './clock/index.js';
export { consoleLogger, silentLogger } from './logging/index.js';
export type { LogFields, Logger } from './logging/index.js';
export {
  DEFAULT_MAX_ENVELOPE_BYTES,
  defineCommand,
  defineEvent,
  defineQuery,
  upcasters,
  uuidv7,
} from './messages/index.js';
export type {
  BackoffOptions,
  CommandDefinition,
  CommandOptions,
  DedupeMode,
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
  SigningKeyInput,
  SigningOptions,
  UpcasterChain,
  Upcasters,
} from './messages/index.js';
export { InMemoryBroker } from './broker/index.js';
export type {
  AttemptRecord,
  DeliveryOrder,
  ErrorInfo,
  InMemoryBrokerOptions,
  InMemoryBrokerStats,
  MessageBroker,
} from './broker/index.js';
export { CommandHandler, EventHandler, On, Projection, QueryHandler } from './handlers/index.js';
export type {
  HandlerClass,
  HandlerClassOf,
  HandlerOptions,
  HandlesCommand,
  HandlesEvent,
  HandlesQuery,
  MessageContext,
  PayloadOfEach,
  SendOptions,
} from './handlers/index.js';
export type { EnvelopeEncoder, OutgoingTraceInfo, TraceparentProvider } from './messages/index.js';
export { DEFAULT_RETRY, isTransientFailure } from './dispatch/index.js';
export type {
  DeadLetteredEvent,
  DispatchHooks,
  EnvelopeVerifier,
  HandledEvent,
  HandlerOutcome,
  MessageTelemetry,
  Middleware,
  MiddlewareContext,
  OutageOptions,
  PausedEvent,
  PauseSubject,
  ProcessEnd,
  ProcessInfo,
  ProcessObservation,
  ProjectionLag,
  PublishOrigin,
  RefusedInfo,
  ResumedEvent,
  TelemetrySources,
  RetryingEvent,
  TransientClassifier,
  StopOptions,
} from './dispatch/index.js';
export { HarrierTokens, createBus } from './bus/index.js';
export type {
  BusOptions,
  MessageBus,
  MessageBusWithProjections,
  MessageScopeOptions,
  PrepareOptions,
  ScheduleOptions,
} from './bus/index.js';
export {
  InMemoryDeadLetterStore,
  deadLetterGroups,
  replayOutcome,
  summarizeReplay,
} from './dead-letters/index.js';
export type {
  DeadLetterFilter,
  DeadLetterGroup,
  DeadLetterGroupPage,
  DeadLetterGroupPageOptions,
  DeadLetterPage,
  DeadLetterPageOptions,
  DeadLetterReason,
  DeadLetterRecord,
  DeadLetterStatus,
  DeadLetterStore,
  InMemoryDeadLetterStoreOptions,
  LogPosition,
  ReplayErrorCode,
  ReplayFailure,
  ReplayRecord,
  ReplayOutcome,
  ReplayRefusal,
  ReplayResult,
  ReplayRunOptions,
  ReplaySuccess,
  ReplaySummary,
  ReplayTelemetry,
  ReplayTraceInfo,
} from './dead-letters/index.js';
export { FileEventLog, InMemoryCheckpointStore, InMemoryEventLog } from './log/index.js';
export type {
  CheckpointStore,
  CommitOptions,
  EventLog,
  FileEventLogLostOffsets,
  FileEventLogOptions,
  FileEventLogRepair,
  InMemoryEventLogOptions,
  ProjectionGeneration,
  RebuildMarker,
  TopicInfo,
  TopicSpec,
} from './log/index.js';
export { ProjectionRunner } from './projections/index.js';
export type {
  CheckpointLag,
  PartitionStatus,
  PoisonPolicy,
  ProjectionStatus,
  ResettableProjection,
} from './projections/index.js';
export type {
  AdminBrokerOptions,
  EndpointTopology,
  OutboxAdmin,
  ParkedOutboxPage,
  ParkedOutboxPageOptions,
  ParkedOutboxReason,
  ParkedOutboxRow,
  ReplayAllParkedOptions,
  StoreAdmin,
  SubscriptionTopology,
  SystemAdmin,
  Topology,
  TransportAdmin,
  WithTransportOptions,
} from './admin/index.js';
export {
  DEFAULT_COMPLETED_RETENTION_MS,
  Handles,
  InMemorySagaStore,
  SAGA_APPLIED_KEPT,
  SAGA_APPLIED_MAX_BYTES,
  SAGA_APPLIED_RETENTION_MS,
  SAGA_CONFLICT_TRIES,
  Saga,
  StartedBy,
  sagaStateOf,
} from './sagas/index.js';
export {
  InMemoryScheduleStore,
  SCHEDULE_HEADER,
  SCHEDULE_TICK_HEADER,
  tickMessageId,
} from './schedules/index.js';
export type {
  CatchUp,
  EveryOptions,
  ScheduleRecord,
  ScheduleTickError,
  ScheduleStore,
  ScheduleTiming,
} from './schedules/index.js';
export type {
  HandlesOptions,
  InMemorySagaStoreOptions,
  SagaAppliedStep,
  SagaContext,
  SagaCorrelation,
  SagaInstance,
  SagaMissingRule,
  SagaOptions,
  SagaStepDescriptor,
  SagaListFilter,
  SagaPage,
  SagaSummary,
  SagaPageOptions,
  SagaStatus,
  SagaStore,
  SagaStoreCall,
  SagaTimeoutRecord,
  SagaWrite,
  StartedByOptions,
} from './sagas/index.js';
