import { getClassMetadata, injectable as coreInjectable } from '@inversifyjs/core';
import { Container, injectable, type Newable } from 'inversify';
import type { HandlerInvoker } from '../dispatch/handler-pipeline-options.js';
import type { HandlerContext } from '../dispatch/handler-context.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { HarrierTokens } from './tokens.js';

/** How each message's child container is set up. */
export interface MessageScopeOptions {
  /**
   * Classes bound afresh in every message's child container, one instance per message, so they can
   * inject {@link HarrierTokens.MessageContext} and {@link HarrierTokens.Envelope}.
   * @defaultValue []
   */
  readonly scoped?: readonly Newable[];
  /**
   * Called with each message's child container before the handler is resolved, to bind more.
   * @defaultValue none
   */
  readonly configure?: (child: Container, context: HandlerContext) => void;
  /**
   * When to make a child container for a message: `auto` makes one whenever something could see it
   * (`scoped` or `configure` is set, or the handler itself injects a {@link HarrierTokens} token);
   * `always` makes one for every message.
   * @defaultValue 'auto'
   */
  readonly childContainer?: 'auto' | 'always';
  /**
   * Whether a handler gets a new instance per message (`'fresh'`) or keeps the one resolved for its
   * first message (`'reuse'`), for handlers resolved without a child container.
   *
   * @remarks
   * `'reuse'` trades the guarantee that no state carries from one message to the next through the
   * handler instance (its fields, and the transient or `inRequestScope()` services it injects, are
   * those of its first message) for speed: no container resolution per message, so a binding of the
   * handler class changed in the container after its first message is not seen either. Use it only
   * for stateless handlers. It cannot be combined with `scoped`, `configure` or `childContainer:
   * 'always'` (those make a child container per message, whose handler instance is always fresh).
   * See docs/dependency-injection.md.
   * @throws HarrierError `invalid-option` for any other value, or with those options.
   * @defaultValue 'fresh'
   */
  readonly handlerInstances?: 'fresh' | 'reuse';
}

/**
 * The inversify versions Harrier is tested with: its peer dependency range, named in the error for a
 * container from another copy of inversify.
 */
export const SUPPORTED_INVERSIFY = '^8.2.3';

/**
 * True when the `@inversifyjs/core` Harrier imports is the copy inversify itself uses (inversify
 * re-exports its decorators from there), so the class metadata Harrier reads is the one `@inject`
 * wrote. When an app ends up with two copies, Harrier reads no metadata and resolves every handler
 * through a child container instead, which is correct whatever the handler injects.
 */
const sameCore = (injectable as unknown) === (coreInjectable as unknown);

/**
 * Returns `container` when it is a Container of the inversify Harrier loaded.
 *
 * @remarks
 * A container from another copy of inversify (another major in the app, or a second copy of the same
 * one) fails deep inside inversify with a TypeError about a private field as soon as Harrier makes a
 * child container of it, so it is refused up front with the fix.
 * @throws HarrierError `foreign-container` naming the inversify range to install.
 */
export function ownContainer(container: unknown, where: string): Container {
  if (container instanceof Container) return container;
  const constructorName: unknown =
    typeof container === 'object' && container !== null
      ? (container as { constructor?: { name?: unknown } }).constructor?.name
      : undefined;
  const what =
    typeof constructorName === 'string' && constructorName !== ''
      ? `a ${constructorName}`
      : container === null
        ? 'null'
        : `a ${typeof container}`;
  throw new HarrierError(
    'foreign-container',
    `The container passed to ${where} (${what}) is not a Container of the inversify Harrier loaded: the app most likely has a second copy of inversify (another major version, or a copy npm could not dedupe). Harrier supports inversify ${SUPPORTED_INVERSIFY}: npm install inversify@${SUPPORTED_INVERSIFY} so the app and Harrier share one copy (npm ls inversify shows them), and create the container with new Container() from 'inversify'`,
  );
}

const perMessageTokens = new Set<unknown>([HarrierTokens.MessageContext, HarrierTokens.Envelope]);

/** True when the class injects the message context or envelope (constructor or property). */
function injectsMessageTokens(target: Newable): boolean {
  const metadata = getClassMetadata(target);
  const values: unknown[] = [];
  for (const argument of metadata.constructorArguments as readonly unknown[]) values.push(argument);
  for (const property of metadata.properties.values()) values.push(property);
  return values.some((element) => {
    const value = (element as { value?: unknown } | undefined)?.value;
    return (
      perMessageTokens.has(value) ||
      perMessageTokens.has((value as { unwrap?: () => unknown } | undefined)?.unwrap?.())
    );
  });
}

/**
 * Resolves handlers from the container, with a child container per message where one is needed.
 *
 * @remarks
 * Only what is resolved through a message's child container can inject that message's context: the
 * handler, the services listed in `scoped`, and transient or request-scoped services they depend on
 * (a root singleton would keep the first message's context, so never inject the context into one).
 * Where nothing injects the context, making a child container per message would only cost time
 * (inversify plans every resolution again in a new container), so by default the handler is resolved
 * from a long-lived handlers container instead: still a fresh instance per message, and
 * `inRequestScope()` services still get one instance per message.
 * @throws HarrierError `foreign-container` when `container` comes from another copy of inversify.
 */
export function createContainerInvoker(
  container: Container,
  options: MessageScopeOptions = {},
): ContainerInvoker {
  const invoke = containerInvoker(container, options);
  // Always a promise, as before: an invoker written around this one may call `.then` on it.
  // The executor's throw becomes the rejection, and a returned promise or thenable is adopted.
  return (entry, method, payload, context) =>
    new Promise((resolve) => {
      resolve(invoke(entry, method, payload, context));
    });
}

/** What {@link createContainerInvoker} returns: a {@link HandlerInvoker} that always returns a promise. */
export type ContainerInvoker = (
  entry: HandlerEntry,
  method: string,
  payload: unknown,
  context: HandlerContext,
) => Promise<unknown>;

/** The options set in `options` that make a child container per message, by name. */
function childPerMessageOptions(options: MessageScopeOptions): string[] {
  return [
    ...((options.scoped?.length ?? 0) > 0 ? ['scoped'] : []),
    ...(options.configure !== undefined ? ['configure'] : []),
    ...(options.childContainer === 'always' ? ["childContainer: 'always'"] : []),
  ];
}

/**
 * True for `handlerInstances: 'reuse'`.
 * @param conflicting - {@link childPerMessageOptions} of `options`.
 * @throws HarrierError `invalid-option` for a value other than `'fresh'` or `'reuse'`, or `'reuse'`
 *   with options that make a child container per message.
 */
function handlerInstancesOf(options: MessageScopeOptions, conflicting: readonly string[]): boolean {
  const value: unknown = options.handlerInstances;
  if (value === undefined || value === 'fresh') return false;
  if (value !== 'reuse') {
    throw new HarrierError(
      'invalid-option',
      `messageScope.handlerInstances is ${typeof value === 'string' ? JSON.stringify(value) : `a ${typeof value}`}: use 'fresh' (a new handler instance per message, the default) or 'reuse' (one instance per handler, for stateless handlers)`,
    );
  }
  if (conflicting.length > 0) {
    throw new HarrierError(
      'invalid-option',
      `messageScope.handlerInstances 'reuse' cannot be combined with ${conflicting.join(' and ')}: those make a child container, and so a fresh handler, per message. Remove handlerInstances, or remove ${conflicting.join(' and ')}`,
    );
  }
  return true;
}

/**
 * The bus's own invoker: as {@link createContainerInvoker}, but it returns a synchronous handler's
 * value as it is and lets its throw through (the pipeline turns both into its outcome), so a call
 * costs no promise.
 *
 * @throws HarrierError `foreign-container` when `container` comes from another copy of inversify.
 */
export function containerInvoker(container: Container, options: MessageScopeOptions = {}): HandlerInvoker {
  const root = ownContainer(container, 'createContainerInvoker');
  const handlers = new Container({ parent: root });
  const childPerMessage = childPerMessageOptions(options);
  const reuse = handlerInstancesOf(options, childPerMessage);
  const always = !sameCore || childPerMessage.length > 0;
  const needsChild = new Map<HandlerEntry, boolean>();
  /** With `handlerInstances: 'reuse'`: the one instance of each handler resolved without a child. */
  const reused = new Map<HandlerEntry, Record<string, unknown>>();
  let lastEntry: HandlerEntry | undefined;
  let lastChild = false;
  /** The instance to call for `lastEntry` on every message (`'reuse'` only). */
  let lastInstance: Record<string, unknown> | undefined;

  const resolve = (from: Container, entry: HandlerEntry): Record<string, unknown> => {
    try {
      return from.get(entry.target as unknown as Newable) as Record<string, unknown>;
    } catch (error) {
      throw new HarrierError(
        'resolution-failed',
        `Could not resolve handler ${entry.name} from the container: ${(error as Error).message}. Bind its dependencies, and list services that inject the message context in messageScope.scoped`,
        { cause: error },
      );
    }
  };

  /** Sets `lastEntry`, `lastChild` and `lastInstance` for `entry` (a handler other than the last). */
  const remember = (entry: HandlerEntry): void => {
    const target = entry.target as unknown as Newable;
    let child = needsChild.get(entry);
    if (child === undefined) {
      child = always || injectsMessageTokens(target);
      needsChild.set(entry, child);
      if (!child && !handlers.isBound(target)) handlers.bind(target).toSelf();
    }
    let instance: Record<string, unknown> | undefined;
    if (reuse && !child) {
      instance = reused.get(entry);
      if (instance === undefined) {
        instance = resolve(handlers, entry);
        reused.set(entry, instance);
      }
    }
    // A bus that calls one handler in a row (execute in a loop, a busy command) skips the maps.
    lastEntry = entry;
    lastChild = child;
    lastInstance = instance;
  };

  /** The handler resolved from a new child container of `root` set up for this message. */
  const resolveInChild = (entry: HandlerEntry, context: HandlerContext): Record<string, unknown> => {
    const target = entry.target as unknown as Newable;
    const scope = new Container({ parent: root });
    scope.bind(HarrierTokens.MessageContext).toConstantValue(context);
    scope.bind(HarrierTokens.Envelope).toConstantValue(context.envelope);
    for (const scoped of options.scoped ?? []) scope.bind(scoped).toSelf().inSingletonScope();
    options.configure?.(scope, context);
    if (!scope.isBound(target)) scope.bind(target).toSelf();
    return resolve(scope, entry);
  };

  return (entry, method, payload, context) => {
    if (entry !== lastEntry) remember(entry);
    // 'reuse' keeps the handler's one instance: no resolution at all.
    const instance = lastInstance ?? (lastChild ? resolveInChild(entry, context) : resolve(handlers, entry));
    const fn = instance[method] as (payload: unknown, context: HandlerContext) => unknown;
    // What the handler returned, as it is: a plain value needs no promise (nor its ticks), a promise
    // is handed on; what it throws reaches the pipeline, which rejects with it.
    return fn.call(instance, payload, context);
  };
}
