import type { HandlerInvoker } from '../../../src/extend.js';

/**
 * An invoker that makes the handler with `new` and hands on what it returns as it is (a plain value
 * stays plain), as the bus's own invoker does, without a container.
 */
export const plainInvoker: HandlerInvoker = (entry, method, payload, context) => {
  const instance = new (entry.target as new () => Record<string, (p: unknown, c: unknown) => unknown>)();
  return instance[method]?.(payload, context);
};
