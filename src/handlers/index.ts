export {
  CommandHandler,
  EventHandler,
  On,
  Projection,
  QueryHandler,
  type HandlerClassOf,
  type HandlesCommand,
  type HandlesEvent,
  type HandlesQuery,
  type OnMethodDescriptor,
  type PayloadOfEach,
} from './decorators.js';
export {
  getHandlerMetadata,
  type HandlerClass,
  type HandlerKind,
  type HandlerMetadata,
  type HandlerOptions,
  type HandlerRoute,
} from './handler-metadata.js';
export { HandlerRegistry, type HandlerEntry } from './handler-registry.js';
export type { MessageContext, SendOptions } from './message-context.js';
