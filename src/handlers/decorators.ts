import type {
  CommandDefinition,
  EventDefinition,
  PayloadOf,
  QueryDefinition,
  ResultOf,
} from '../messages/definition.js';
import {
  addPendingOn,
  setHandlerMetadata,
  takePendingOn,
  type HandlerClass,
  type HandlerKind,
  type HandlerOptions,
} from './handler-metadata.js';
import type { MessageContext } from './message-context.js';

/** The contract of a command handler class. */
export interface HandlesCommand<D extends CommandDefinition> {
  handle(payload: PayloadOf<D>, context: MessageContext<PayloadOf<D>>): Promise<ResultOf<D>> | ResultOf<D>;
}

/** The contract of a query handler class. */
export interface HandlesQuery<D extends QueryDefinition> {
  handle(payload: PayloadOf<D>, context: MessageContext<PayloadOf<D>>): Promise<ResultOf<D>> | ResultOf<D>;
}

/** The contract of an event handler class. */
export interface HandlesEvent<D extends EventDefinition> {
  handle(payload: PayloadOf<D>, context: MessageContext<PayloadOf<D>>): Promise<void> | void;
}

function classDecorator(kind: HandlerKind, definitions: readonly unknown[], options: HandlerOptions) {
  return (target: HandlerClass): void => {
    setHandlerMetadata(target, {
      kind,
      target,
      name: options.name ?? target.name,
      routes: definitions.map((definition) => ({ definition, method: 'handle' })),
      options,
    });
  };
}

/**
 * Marks a class as the handler of a command; its `handle(payload, context)` runs once per command.
 *
 * @example
 * ```ts
 * @CommandHandler(PlaceOrder)
 * class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
 *   handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
 *     ctx.publish(OrderPlaced, { orderId: payload.orderId });
 *   }
 * }
 * ```
 */
export function CommandHandler(
  definition: CommandDefinition,
  options: HandlerOptions = {},
): (target: HandlerClass) => void {
  return classDecorator('command', [definition], options);
}

/** Marks a class as the handler of a query, answered in-process through `execute`. */
export function QueryHandler(
  definition: QueryDefinition,
  options: HandlerOptions = {},
): (target: HandlerClass) => void {
  return classDecorator('query', [definition], options);
}

/**
 * Marks a class as a subscription to one or more events; each gets its own copy of each event, so it
 * retries and dead-letters on its own.
 */
export function EventHandler(
  definition: EventDefinition | readonly EventDefinition[],
  options: HandlerOptions = {},
): (target: HandlerClass) => void {
  return classDecorator('event', Array.isArray(definition) ? definition : [definition], options);
}

/**
 * Marks a class as a projection: a read model fed by its `@On(Event)` methods.
 *
 * @param name - the projection's stable name (its subscription and checkpoint identity).
 */
export function Projection(
  name: string,
  options: Omit<HandlerOptions, 'name'> = {},
): (target: HandlerClass) => void {
  return (target: HandlerClass): void => {
    setHandlerMetadata(target, {
      kind: 'projection',
      target,
      name,
      routes: takePendingOn(target.prototype as object),
      options: { ...options, name },
    });
  };
}

/** Marks a method of a `@Projection` class as the handler of one event. */
export function On(definition: EventDefinition): (target: object, method: string | symbol) => void {
  return (target: object, method: string | symbol): void => {
    addPendingOn(target, { definition, method: String(method) });
  };
}
