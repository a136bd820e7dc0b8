import { Inject } from '@nestjs/common';
import { REQUEST } from '@nestjs/core';

/**
 * Injects the `MessageContext` of the message being handled into a request-scoped provider.
 *
 * @remarks
 * Harrier makes a Nest context per message for the handlers that need one (request-scoped or
 * transient, or depending on such a provider) and registers the message's context as that
 * context's `REQUEST`, so this is `@Inject(REQUEST)`: in a provider made for an HTTP request it is
 * the HTTP request instead. Only a provider with `scope: Scope.REQUEST` sees it; a singleton is
 * made once, before any message. The handler itself gets the context as the second argument of
 * `handle`.
 * @example
 * ```ts
 * @Injectable({ scope: Scope.REQUEST })
 * export class AuditTrail {
 *   constructor(@InjectMessageContext() private readonly ctx: MessageContext) {}
 * }
 * ```
 */
export function InjectMessageContext(): PropertyDecorator & ParameterDecorator {
  return Inject(REQUEST);
}
