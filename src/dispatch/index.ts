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
export {
  composeMiddleware,
  type HandlerOutcome,
  type Middleware,
  type MiddlewareContext,
} from './middleware.js';
export {
  prepareMessage,
  type CausingMessage,
  type EnvelopeEncoder,
  type PreparedMessage,
} from './outgoing.js';
export {
  backoffDelay,
  DEFAULT_RETRY,
  isPermanent,
  resolveRetryPolicy,
  type RetryPolicy,
} from './retry-policy.js';
