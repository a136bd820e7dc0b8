export { HarrierError } from './harrier-error.js';
export {
  HARRIER_ERROR_CODES,
  HARRIER_ERROR_CODE_ALIASES,
  type HarrierErrorCode,
  type HarrierErrorCodeAlias,
} from './harrier-error-code.js';
export { DuplicateHandlerError } from './duplicate-handler-error.js';
export { HandlerNotFoundError } from './handler-not-found-error.js';
export { MessageValidationError } from './message-validation-error.js';
export { SagaConflictError } from './saga-conflict-error.js';
export { StaleDeliveryError } from './stale-delivery-error.js';
export { UnknownTopicError } from './unknown-topic-error.js';
export { TransientError } from './transient-error.js';
export { UnrecoverableError } from './unrecoverable-error.js';
