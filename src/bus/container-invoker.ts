import { Container, type Newable } from 'inversify';
import type { HandlerInvoker } from '../dispatch/dispatcher.js';
import type { HandlerContext } from '../dispatch/handler-context.js';
import { HarrierError } from '../errors/harrier-error.js';
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
}

/**
 * Resolves each handler from a child container made for its message.
 *
 * @remarks
 * inversify resolves a binding's dependencies in the container that owns the binding, so a service
 * bound in the root container cannot see the per-message context: list such services in `scoped`.
 * Handler classes not bound in the root container are bound in the child, one instance per message.
 */
export function createContainerInvoker(
  container: Container,
  options: MessageScopeOptions = {},
): HandlerInvoker {
  return async (entry, method, payload, context) => {
    const child = new Container({ parent: container });
    child.bind(HarrierTokens.MessageContext).toConstantValue(context);
    child.bind(HarrierTokens.Envelope).toConstantValue(context.envelope);
    for (const scoped of options.scoped ?? []) child.bind(scoped).toSelf().inSingletonScope();
    options.configure?.(child, context);
    const target = entry.target as unknown as Newable;
    if (!child.isBound(target)) child.bind(target).toSelf();
    let instance: Record<string, unknown>;
    try {
      instance = child.get(target) as Record<string, unknown>;
    } catch (error) {
      throw new HarrierError(
        'resolution-failed',
        `Could not resolve handler ${entry.name} from the container: ${(error as Error).message}. Bind its dependencies, and list services that inject the message context in scoped`,
        { cause: error },
      );
    }
    const fn = instance[method] as (payload: unknown, context: HandlerContext) => unknown;
    return await fn.call(instance, payload, context);
  };
}
