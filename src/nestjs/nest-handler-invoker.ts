import { ContextIdFactory, type ModuleRef } from '@nestjs/core';
import type { HandlerContext } from '../dispatch/handler-context.js';
import type { HandlerInvoker } from '../dispatch/handler-pipeline-options.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerClass } from '../handlers/handler-metadata.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import type { ProviderWrapper } from './discover-handlers.js';

type Handler = Record<string, unknown>;
type HandlerMethod = (payload: unknown, context: HandlerContext) => unknown;

/** Calls `method` of `instance` (the registry checked at start-up that its class has it). */
function call(instance: Handler, method: string, payload: unknown, context: HandlerContext): unknown {
  return (instance[method] as HandlerMethod).call(instance, payload, context);
}

/** How a handler's instance is had: Nest's one instance, or one made per message. */
type Lifetime =
  | { readonly instance: Handler; readonly wrapper?: undefined }
  | { readonly instance?: undefined; readonly wrapper: ProviderWrapper };

/**
 * Calls handlers on the instances Nest's injector makes: {@link createBus}'s `invoke` for a Nest
 * application.
 *
 * @remarks
 * A handler whose provider Nest makes once (default scope, and nothing it depends on is
 * request-scoped) is called on that one instance, as Nest calls any singleton. Any other (its own
 * `Scope.REQUEST` or `Scope.TRANSIENT`, or a request-scoped dependency, which makes Nest scope the
 * handler too) gets a new Nest context per message: `ContextIdFactory.getByRequest(context)` (so a
 * `ContextIdStrategy` applies, with the message context as its request), the message context
 * registered as that context's `REQUEST`, and the handler resolved in it through
 * `moduleRef.resolve`, so every request-scoped provider in its tree is made afresh for the message.
 * Which of the two a handler is, Nest knows only once it has made its providers, so it is decided
 * at the handler's first message.
 * @param providers - the provider of each handler class ({@link discoverHandlers}).
 * @param moduleRef - resolves request-scoped handlers (any module's: the search is not strict).
 */
export function nestHandlerInvoker(
  providers: ReadonlyMap<HandlerClass, ProviderWrapper>,
  moduleRef: ModuleRef,
): HandlerInvoker {
  const lifetimes = new Map<HandlerEntry, Lifetime>();
  // A bus that calls one handler in a row (a busy command, execute in a loop) skips the map.
  let lastEntry: HandlerEntry | undefined;
  let lastLifetime: Lifetime | undefined;

  const lifetimeOf = (entry: HandlerEntry): Lifetime => {
    const known = lifetimes.get(entry);
    if (known !== undefined) return known;
    const wrapper = providers.get(entry.target);
    if (wrapper === undefined) {
      throw new HarrierError(
        'resolution-failed',
        `Handler ${entry.name} is not a provider of the Nest application: list ${entry.target.name} in the providers of a module`,
      );
    }
    // Nest's own test for one instance in every context (AbstractInstanceResolver.resolvePerContext).
    if (wrapper.isDependencyTreeStatic() && !wrapper.isTransient) {
      const instance = wrapper.instance as Handler | undefined | null;
      if (instance === undefined || instance === null) {
        // Not remembered: Nest creates it during app.init(), and the next message finds it.
        throw new HarrierError(
          'resolution-failed',
          `Handler ${entry.name} has not been created by Nest yet: Nest creates providers in app.init() (which app.listen() calls), so send and execute once it has resolved`,
        );
      }
      const lifetime: Lifetime = { instance };
      lifetimes.set(entry, lifetime);
      return lifetime;
    }
    const lifetime: Lifetime = { wrapper };
    lifetimes.set(entry, lifetime);
    return lifetime;
  };

  const resolveForMessage = (
    entry: HandlerEntry,
    wrapper: ProviderWrapper,
    method: string,
    payload: unknown,
    context: HandlerContext,
  ): Promise<unknown> => {
    const contextId = ContextIdFactory.getByRequest(context);
    moduleRef.registerRequestByContextId(context, contextId);
    return moduleRef.resolve<unknown, Handler>(wrapper.token, contextId, { strict: false }).then(
      (instance) => call(instance, method, payload, context),
      (error: unknown) => {
        throw new HarrierError(
          'resolution-failed',
          `Nest could not resolve handler ${entry.name} for message ${context.messageId}: ${error instanceof Error ? error.message : String(error)}`,
          { cause: error },
        );
      },
    );
  };

  return (entry, method, payload, context) => {
    if (entry !== lastEntry) {
      lastLifetime = lifetimeOf(entry);
      lastEntry = entry;
    }
    const lifetime = lastLifetime as Lifetime;
    if (lifetime.wrapper !== undefined) {
      return resolveForMessage(entry, lifetime.wrapper, method, payload, context);
    }
    return call(lifetime.instance, method, payload, context);
  };
}
