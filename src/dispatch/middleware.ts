import type { MessageContext } from '../handlers/message-context.js';
import type { HandlerKind } from '../handlers/handler-metadata.js';
import type { MessageDefinition } from '../messages/definition.js';

/** What middleware sees of a handler call. */
export interface MiddlewareContext {
  readonly definition: MessageDefinition;
  readonly handler: string;
  readonly handlerKind: HandlerKind;
  readonly message: MessageContext;
  /** True for `execute` (in-process), false for a broker delivery. */
  readonly inProcess: boolean;
}

/** How a handler call ended. */
export type HandlerOutcome =
  { readonly ok: true; readonly result: unknown } | { readonly ok: false; readonly error: unknown };

/**
 * Code that runs before, after or around every handler call, for logging, metrics and tracing.
 *
 * @remarks
 * Middleware runs in the order listed; the first is outermost. An error thrown by `before` or
 * `around` fails the handler call like an error of the handler; errors thrown by `after` are logged
 * and ignored.
 */
export interface Middleware {
  /** Name used in logs. @defaultValue 'middleware' */
  readonly name?: string;
  before?(context: MiddlewareContext): void | Promise<void>;
  around?(context: MiddlewareContext, next: () => Promise<unknown>): Promise<unknown>;
  after?(context: MiddlewareContext, outcome: HandlerOutcome): void | Promise<void>;
}

/** Wraps `call` in the middleware, first listed outermost. */
export function composeMiddleware(
  middleware: readonly Middleware[],
  context: MiddlewareContext,
  call: () => Promise<unknown>,
  onAfterError: (middleware: Middleware, error: unknown) => void,
): Promise<unknown> {
  let next = call;
  for (const m of [...middleware].reverse()) {
    const inner = next;
    next = async () => {
      await m.before?.(context);
      let result: unknown;
      try {
        result = m.around === undefined ? await inner() : await m.around(context, inner);
      } catch (error) {
        await runAfter(m, context, { ok: false, error }, onAfterError);
        throw error;
      }
      await runAfter(m, context, { ok: true, result }, onAfterError);
      return result;
    };
  }
  return next();
}

async function runAfter(
  m: Middleware,
  context: MiddlewareContext,
  outcome: HandlerOutcome,
  onAfterError: (middleware: Middleware, error: unknown) => void,
): Promise<void> {
  try {
    await m.after?.(context, outcome);
  } catch (error) {
    onAfterError(m, error);
  }
}
