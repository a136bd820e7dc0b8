import type { DiscoveryService } from '@nestjs/core';
import { HarrierError } from '../errors/harrier-error.js';
import { getHandlerMetadata, type HandlerClass } from '../handlers/handler-metadata.js';

/** A provider as Nest's `DiscoveryService` lists it (its `InstanceWrapper`). */
export type ProviderWrapper = ReturnType<DiscoveryService['getProviders']>[number];

/** The handler classes of a Nest application, and the provider Nest makes each one from. */
export interface DiscoveredHandlers {
  /** Command, event and query handlers and projections, for `createBus({ handlers })`. */
  readonly handlers: readonly HandlerClass[];
  /** `@Saga` classes, for `createBus({ sagas })`. */
  readonly sagas: readonly HandlerClass[];
  /** The provider of each class above. */
  readonly providers: ReadonlyMap<HandlerClass, ProviderWrapper>;
}

/** The name of the module that declares `wrapper`, for errors. */
function moduleOf(wrapper: ProviderWrapper): string {
  return wrapper.host?.metatype.name ?? 'a module';
}

/**
 * Finds the providers of every module whose class carries a Harrier handler decorator.
 *
 * @remarks
 * Class providers count, listed as `providers: [Handler]` or `{ provide, useClass: Handler }`;
 * a `useFactory` or `useValue` provider has no class for Nest to show before it has run, so it is
 * not found. Runs while Nest creates providers: every module is scanned by then, but instances may
 * not exist yet, so only classes are read here.
 * @throws HarrierError `invalid-handler` when one handler class is a provider of two modules (two
 *   instances, each with its own dependencies: the bus could call only one of them).
 */
export function discoverHandlers(discovery: DiscoveryService): DiscoveredHandlers {
  const handlers: HandlerClass[] = [];
  const sagas: HandlerClass[] = [];
  const providers = new Map<HandlerClass, ProviderWrapper>();
  for (const wrapper of discovery.getProviders()) {
    const metadata = getHandlerMetadata(wrapper.metatype);
    if (metadata === undefined) continue;
    const target = metadata.target;
    const earlier = providers.get(target);
    if (earlier !== undefined) {
      throw new HarrierError(
        'invalid-handler',
        `${target.name} is a provider of both ${moduleOf(earlier)} and ${moduleOf(wrapper)}: list a handler in the providers of one module only (export it from there if other modules inject it), so that one instance handles its messages`,
      );
    }
    providers.set(target, wrapper);
    (metadata.kind === 'saga' ? sagas : handlers).push(target);
  }
  return { handlers, sagas, providers };
}
