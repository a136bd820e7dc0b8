import type { DiscoveryService, ModuleRef } from '@nestjs/core';
import { createBus, type MessageBus } from '../bus/message-bus.js';
import { HarrierError } from '../errors/harrier-error.js';
import { discoverHandlers } from './discover-handlers.js';
import type { HarrierModuleOptions } from './harrier-module-options.js';
import { nestHandlerInvoker } from './nest-handler-invoker.js';
import { nestLogger } from './nest-logger.js';

/** Options of `createBus` that Nest provides instead, with what to do. */
const NEST_PROVIDES: Readonly<Record<string, string>> = {
  handlers: 'list handler classes in the providers of a Nest module; HarrierModule finds them',
  sagas: 'list @Saga classes in the providers of a Nest module; HarrierModule finds them',
  container: "Nest's injector makes the handlers: provide their dependencies in Nest modules",
  messageScope:
    'give a handler (or a provider it depends on) scope: Scope.REQUEST for one instance per message',
  invoke: "HarrierModule calls handlers through Nest's injector",
};

/**
 * The bus of a Nest application: `createBus` with the application's handler providers, called on
 * the instances Nest makes.
 *
 * @throws HarrierError `invalid-option` for an option Nest provides instead (`handlers`, `sagas`,
 *   `container`, `messageScope`, `invoke`), naming the Nest way; and whatever `createBus` throws.
 * @throws HarrierError `invalid-handler` when a handler class is a provider of two modules.
 */
export function createNestBus(
  options: HarrierModuleOptions,
  discovery: DiscoveryService,
  moduleRef: ModuleRef,
): MessageBus {
  for (const [name, fix] of Object.entries(NEST_PROVIDES)) {
    if (name in options) {
      throw new HarrierError('invalid-option', `HarrierModule does not take ${name}: ${fix}`);
    }
  }
  const found = discoverHandlers(discovery);
  return createBus({
    logger: nestLogger(),
    ...options,
    handlers: found.handlers,
    sagas: found.sagas,
    invoke: nestHandlerInvoker(found.providers, moduleRef),
  });
}
