export { Dispatcher, type DispatcherOptions, type StopOptions } from './dispatcher.js';
export { HandlerPipeline } from './handler-pipeline.js';
export type { EnvelopeVerifier, HandlerInvoker, HandlerPipelineOptions } from './handler-pipeline-options.js';
export type { PipelineInput } from './pipeline-input.js';
export type {
  AbandonedOutcome,
  DeadLetterOutcome,
  HandledOutcome,
  PausedOutcome,
  PipelineOutcome,
  RetryOutcome,
} from './pipeline-outcome.js';
export type { PipelineStep, StepResult, StepRunner } from './step-runner.js';
export type { DeadLetteredEvent, DispatchHooks, HandledEvent, RetryingEvent } from './dispatch-hooks.js';
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
  UnitOfWorkBus,
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
