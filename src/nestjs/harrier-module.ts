import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { DiscoveryModule, DiscoveryService, ModuleRef } from '@nestjs/core';
import { HarrierTokens } from '../bus/tokens.js';
import { BusLifecycle } from './bus-lifecycle.js';
import { createNestBus } from './create-nest-bus.js';
import type { HarrierModuleAsyncOptions, HarrierModuleOptions } from './harrier-module-options.js';
import { MessageBus } from './message-bus-token.js';
import { HARRIER_MODULE_OPTIONS } from './tokens.js';

/** The module: the bus made from `optionsProvider`'s options, its lifecycle and its tokens. */
function busModule(imports: NonNullable<DynamicModule['imports']>, optionsProvider: Provider): DynamicModule {
  return {
    module: HarrierModule,
    global: true,
    imports: [DiscoveryModule, ...imports],
    providers: [
      optionsProvider,
      {
        provide: HarrierTokens.MessageBus,
        useFactory: createNestBus,
        inject: [HARRIER_MODULE_OPTIONS, DiscoveryService, ModuleRef],
      },
      { provide: MessageBus, useExisting: HarrierTokens.MessageBus },
      BusLifecycle,
    ],
    exports: [HarrierTokens.MessageBus, MessageBus],
  };
}

/**
 * Harrier's bus in a Nest application: one endpoint whose handlers are the application's providers.
 *
 * @remarks
 * Import it once, in the root module; it is global, so every module can inject the bus
 * (`@InjectBus()`, or the {@link MessageBus} class as the type). Handler, projection and saga
 * classes are declared with Harrier's decorators and listed as providers of any module: the module
 * finds them through Nest's `DiscoveryService` and calls them on the instances Nest's injector
 * makes, one per message for request-scoped ones. The bus starts in `onApplicationBootstrap` and
 * stops, draining in-flight handlers, in `beforeApplicationShutdown` (`app.close()`, or a signal
 * with `app.enableShutdownHooks()`). See docs/nestjs.md.
 * @example
 * ```ts
 * @Module({
 *   imports: [HarrierModule.forRoot({ endpoint: 'orders' })],
 *   controllers: [OrdersController],
 *   providers: [PlaceOrderHandler, OrderPlacedHandler],
 * })
 * export class AppModule {}
 * ```
 */
@Module({})
export class HarrierModule {
  /**
   * The bus made from `options` (those of `createBus` but the handler lists).
   * @throws HarrierError from Nest's start-up, as `createBus` throws for bad options or handlers.
   */
  static forRoot(options: HarrierModuleOptions = {}): DynamicModule {
    return busModule([], { provide: HARRIER_MODULE_OPTIONS, useValue: options });
  }

  /**
   * The bus made from options a factory returns, with providers Nest injects into it (a
   * `ConfigService`, a connection made elsewhere).
   * @example
   * ```ts
   * HarrierModule.forRootAsync({
   *   imports: [ConfigModule],
   *   inject: [ConfigService],
   *   useFactory: (config: ConfigService) => ({
   *     endpoint: config.getOrThrow('ENDPOINT'),
   *     broker: new BullMqBroker({ connection: config.getOrThrow('REDIS_URL') }),
   *   }),
   * });
   * ```
   */
  static forRootAsync(options: HarrierModuleAsyncOptions): DynamicModule {
    return busModule(options.imports ?? [], {
      provide: HARRIER_MODULE_OPTIONS,
      useFactory: options.useFactory,
      inject: options.inject ?? [],
    });
  }
}
