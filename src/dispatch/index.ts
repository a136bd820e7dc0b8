export { Dispatcher, type DispatcherOptions, type StopOptions } from './dispatcher.js';
export {
  HandlerPipeline,
  type AbandonedOutcome,
  type DeadLetteredEvent,
  type DeadLetterOutcome,
  type DispatchHooks,
  type EnvelopeVerifier,
  type HandledEvent,
  type HandledOutcome,
  type HandlerInvoker,
  type HandlerPipelineOptions,
  type PipelineInput,
  type PausedOutcome,
  type PipelineOutcome,
  type PipelineStep,
  type RetryingEvent,
  type RetryOutcome,
  type StepResult,
  type StepRunner,
} from './handler-pipeline.js';
export { HandlerContext, ReceivedHandlerContext } from './handler-context.js';
export { MessagePublisher, type MessagePublisherOptions, type PublishOptions } from './message-publisher.js';
export type {
  MessageTelemetry,
  ProcessEnd,
  ProcessInfo,
  ProcessObservation,
  ProjectionLag,
  PublishOrigin,
  RefusedInfo,
  TelemetrySources,
} from './message-telemetry.js';
export {
  composeMiddleware,
  type HandlerOutcome,
  type Middleware,
  type MiddlewareContext,
} from './middleware.js';
export type {
  LogPosition,
  TransactionalUnitOfWork,
  UnitOfWorkCall,
  UnitOfWorkResult,
} from './transactional-unit-of-work.js';
export {
  OutageBreaker,
  resolveOutageOptions,
  type OutageListener,
  type OutageOptions,
  type PausedEvent,
  type PauseSubject,
  type ResumedEvent,
} from './outage-breaker.js';
export { isTransientFailure, type TransientClassifier } from './transient-failure.js';
export {
  backoffDelay,
  DEFAULT_RETRY,
  isPermanent,
  resolveRetryPolicy,
  type RetryPolicy,
} from './retry-policy.js';
