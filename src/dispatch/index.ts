export {
  Dispatcher,
  type DeadLetteredEvent,
  type DispatcherOptions,
  type DispatchHooks,
  type EnvelopeVerifier,
  type HandledEvent,
  type HandlerInvoker,
  type RetryingEvent,
  type StopOptions,
} from './dispatcher.js';
export { HandlerContext } from './handler-context.js';
export { MessagePublisher, type MessagePublisherOptions } from './message-publisher.js';
export {
  composeMiddleware,
  type HandlerOutcome,
  type Middleware,
  type MiddlewareContext,
} from './middleware.js';
export {
  backoffDelay,
  DEFAULT_RETRY,
  isPermanent,
  resolveRetryPolicy,
  type RetryPolicy,
} from './retry-policy.js';
