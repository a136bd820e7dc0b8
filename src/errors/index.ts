export { HarrierError } from './harrier-error.js';
export { DuplicateHandlerError } from './duplicate-handler-error.js';
export { HandlerNotFoundError } from './handler-not-found-error.js';
export { MessageValidationError } from './message-validation-error.js';
export { StaleDeliveryError } from './stale-delivery-error.js';
export { UnknownTopicError } from './unknown-topic-error.js';
export { UnrecoverableError } from './unrecoverable-error.js';
