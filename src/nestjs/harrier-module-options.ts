import type { FactoryProvider, ModuleMetadata } from '@nestjs/common';
import type { BusOptions } from '../bus/message-bus.js';

/**
 * Options of `HarrierModule.forRoot`: those of `createBus`, less what Nest provides.
 *
 * @remarks
 * Handlers, projections and sagas are not listed here: they are Nest providers, found in every
 * module of the application, and Nest's injector makes them (so `container`, `messageScope` and
 * `invoke` do not apply either). Every other option means what it means for `createBus`.
 * `logger` defaults to Nest's `Logger` (context `Harrier`) instead of JSON lines on stderr.
 */
export type HarrierModuleOptions = Omit<
  BusOptions,
  'handlers' | 'sagas' | 'container' | 'messageScope' | 'invoke'
>;

/** Options of `HarrierModule.forRootAsync`: the bus options made by a factory Nest injects. */
export interface HarrierModuleAsyncOptions {
  /**
   * Modules that export the factory's dependencies (`ConfigModule`, for example).
   * @defaultValue []
   */
  readonly imports?: ModuleMetadata['imports'];
  /**
   * Tokens of the providers passed to `useFactory`, in order.
   * @defaultValue []
   */
  readonly inject?: FactoryProvider['inject'];
  /** Makes the bus options, from the providers listed in `inject`. */
  readonly useFactory: (...args: never[]) => HarrierModuleOptions | Promise<HarrierModuleOptions>;
}
