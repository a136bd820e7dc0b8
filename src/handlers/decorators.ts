import { HarrierError } from '../errors/harrier-error.js';
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
import { checkTimeoutMs } from './handler-timeout.js';
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

/**
 * A class a handler decorator accepts: its `handle(payload, context)` takes payloads of type `P`.
 *
 * @remarks
 * `handle` is typed as a function property, not a method, so TypeScript checks its parameter
 * strictly: `@CommandHandler(PlaceOrder)` on a class whose `handle` takes another definition's payload
 * does not compile.
 */
export type HandlerClassOf<P> = abstract new (...args: never[]) => {
  handle: (payload: P, context: MessageContext<P>) => unknown;
};

/** The property descriptor of a method `@On(Event)` accepts: it takes payloads of type `P`. */
export interface OnMethodDescriptor<P> {
  value?: (payload: P, context: MessageContext<P>) => unknown;
}

/** The payload type of one event definition or of any of a list of them. */
export type PayloadOfEach<D extends EventDefinition | readonly EventDefinition[]> =
  D extends readonly (infer E extends EventDefinition)[]
    ? PayloadOf<E>
    : D extends EventDefinition
      ? PayloadOf<D>
      : never;

/**
 * Refuses a decorator called the TC39 way (`(value, context)`): Harrier's decorators record metadata
 * when TypeScript's `experimentalDecorators` calls them, and the standard ones would record nothing.
 */
export function assertLegacyDecorator(decorator: string, context: unknown): void {
  if (typeof context !== 'object' || context === null) return;
  const { kind, name } = context as { kind?: unknown; name?: unknown };
  if (typeof kind !== 'string') return;
  const where = typeof name === 'string' ? ` on ${kind} ${name}` : '';
  throw new HarrierError(
    'unsupported-decorators',
    `${decorator}${where} was compiled as a standard (TC39) decorator, which Harrier does not support: set "experimentalDecorators": true in the compilerOptions of your tsconfig.json (tsx, esbuild and Vite read it from there) and build again`,
  );
}

/** The type of a definition, for messages (anything else as `?`: the registry refuses it later). */
function typeName(definition: unknown): string {
  const type = (definition as { type?: unknown } | undefined)?.type;
  return typeof type === 'string' ? type : '?';
}

function classDecorator(
  kind: HandlerKind,
  decorator: string,
  definitions: readonly unknown[],
  options: HandlerOptions,
) {
  if (options.timeoutMs !== undefined) {
    checkTimeoutMs(options.timeoutMs, `${decorator}(${definitions.map(typeName).join(', ')}) timeoutMs`);
  }
  return (target: HandlerClass, ...rest: unknown[]): void => {
    assertLegacyDecorator(decorator, rest[0]);
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
 * @remarks
 * The class's `handle` must take the command's payload, or the decorator does not compile.
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 * @throws HarrierError `invalid-option` for a `timeoutMs` that is not above 0 and at most 2147483647.
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
export function CommandHandler<D extends CommandDefinition>(
  definition: D,
  options: HandlerOptions = {},
): (target: HandlerClassOf<PayloadOf<D>>) => void {
  return classDecorator('command', '@CommandHandler', [definition], options);
}

/**
 * Marks a class as the handler of a query, answered in-process through `execute`.
 *
 * @remarks
 * The class's `handle` must take the query's payload, or the decorator does not compile.
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 * @throws HarrierError `invalid-option` for a `timeoutMs` that is not above 0 and at most 2147483647.
 */
export function QueryHandler<D extends QueryDefinition>(
  definition: D,
  options: HandlerOptions = {},
): (target: HandlerClassOf<PayloadOf<D>>) => void {
  return classDecorator('query', '@QueryHandler', [definition], options);
}

/**
 * Marks a class as a subscription to one or more events; each gets its own copy of each event, so it
 * retries and dead-letters on its own.
 *
 * @remarks
 * The class's `handle` must take the payload of every event listed, or the decorator does not compile.
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 * @throws HarrierError `invalid-option` for a `timeoutMs` that is not above 0 and at most 2147483647.
 */
export function EventHandler<const D extends EventDefinition | readonly EventDefinition[]>(
  definition: D,
  options: HandlerOptions = {},
): (target: HandlerClassOf<PayloadOfEach<D>>) => void {
  return classDecorator(
    'event',
    '@EventHandler',
    Array.isArray(definition) ? definition : [definition],
    options,
  );
}

/**
 * Marks a class as a projection: a read model fed by its `@On(Event)` methods.
 *
 * @param name - the projection's stable name (its subscription and checkpoint identity).
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 * @throws HarrierError `invalid-option` for a `timeoutMs` that is not above 0 and at most 2147483647.
 */
export function Projection(
  name: string,
  options: Omit<HandlerOptions, 'name'> = {},
): (target: HandlerClass) => void {
  if (options.timeoutMs !== undefined) checkTimeoutMs(options.timeoutMs, `@Projection('${name}') timeoutMs`);
  return (target: HandlerClass, ...rest: unknown[]): void => {
    assertLegacyDecorator('@Projection', rest[0]);
    setHandlerMetadata(target, {
      kind: 'projection',
      target,
      name,
      routes: takePendingOn(target.prototype as object),
      options: { ...options, name },
    });
  };
}

/**
 * Marks a method of a `@Projection` class as the handler of one event.
 *
 * @remarks
 * The method must take the event's payload, or the decorator does not compile.
 * @throws HarrierError `unsupported-decorators` when compiled without `experimentalDecorators`.
 */
export function On<D extends EventDefinition>(
  definition: D,
): (target: object, method: string | symbol, descriptor: OnMethodDescriptor<PayloadOf<D>>) => void {
  return (target: object, method: unknown): void => {
    assertLegacyDecorator('@On', method);
    addPendingOn(target, { definition, method: String(method) });
  };
}
