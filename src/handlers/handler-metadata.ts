import type { MessageDefinition, RetryOptions } from '../messages/definition.js';

/** What kind of handler a class is. */
export type HandlerKind = 'command' | 'event' | 'query' | 'projection' | 'saga';

/** Options of `@CommandHandler`, `@EventHandler`, `@QueryHandler` and `@Projection`. */
export interface HandlerOptions {
  /**
   * The handler's stable name: its subscription identity in the broker and in dead letters.
   * @defaultValue the class name (set it explicitly if your build minifies class names)
   */
  readonly name?: string;
  /**
   * Retry policy of this handler.
   * @defaultValue the definition's, else the bus's (`DEFAULT_RETRY`: 8 attempts, 2 immediate, then 2.5 s base doubling, 60 s cap, 0.2 jitter)
   */
  readonly retry?: RetryOptions;
  /**
   * How long one call of this handler (with its middleware) may run, in ms, before its attempt fails
   * with HarrierError `handler-timeout`: its signal aborts, the attempt is retried by the retry
   * policy (dead-lettered after the last), and whatever the call does after that is ignored. Only a
   * call that returns a promise is timed. Above 0 and at most 2147483647. See docs/handlers.md.
   * @defaultValue the bus's `handlerTimeoutMs` (300000, 5 minutes)
   */
  readonly timeoutMs?: number;
}

/** A class that a handler decorator can decorate. */
export type HandlerClass = abstract new (...args: never[]) => object;

/** What the decorators record about a handler class. */
export interface HandlerMetadata {
  readonly kind: HandlerKind;
  readonly target: HandlerClass;
  readonly name: string;
  /** The definitions the handler takes, with the method that handles each. */
  readonly routes: readonly { readonly definition: unknown; readonly method: string }[];
  readonly options: HandlerOptions;
}

const metadata = new WeakMap<object, HandlerMetadata>();
const pendingOn = new WeakMap<object, { definition: unknown; method: string }[]>();

/** Records the metadata of a decorated class. */
export function setHandlerMetadata(target: HandlerClass, value: HandlerMetadata): void {
  metadata.set(target, value);
}

/** The metadata of a decorated class, if any. */
export function getHandlerMetadata(target: unknown): HandlerMetadata | undefined {
  return typeof target === 'function' ? metadata.get(target) : undefined;
}

/** Records an `@On` method of a projection class, before `@Projection` collects them. */
export function addPendingOn(target: object, route: { definition: unknown; method: string }): void {
  const list = pendingOn.get(target) ?? [];
  list.push(route);
  pendingOn.set(target, list);
}

/** The `@On` methods recorded on a class. */
export function takePendingOn(target: object): { definition: unknown; method: string }[] {
  return pendingOn.get(target) ?? [];
}

/** A route of a handler: a definition and its method. */
export interface HandlerRoute {
  readonly definition: MessageDefinition;
  readonly method: string;
}
