export {
  createContainerInvoker,
  type ContainerInvoker,
  type MessageScopeOptions,
} from './container-invoker.js';
export {
  createBus,
  dispatcherOf,
  type BusOptions,
  type MessageBus,
  type MessageBusWithProjections,
  type ScheduleOptions,
  type PrepareOptions,
} from './message-bus.js';
export { HarrierTokens } from './tokens.js';
