/**
 * `harrier/nestjs`: Harrier's bus in a NestJS application.
 *
 * @remarks
 * `HarrierModule.forRoot(...)` makes the bus from the same options as `createBus`; handlers,
 * projections and sagas are Nest providers declared with Harrier's decorators (imported from
 * `harrier`). Needs `@nestjs/common` and `@nestjs/core` (optional peer dependencies of Harrier,
 * needed only by this entry point). See docs/nestjs.md.
 *
 * @packageDocumentation
 */
export { HarrierModule } from './harrier-module.js';
export type { HarrierModuleAsyncOptions, HarrierModuleOptions } from './harrier-module-options.js';
export { InjectBus } from './inject-bus.js';
export { InjectMessageContext } from './inject-message-context.js';
export { MessageBus } from './message-bus-token.js';
export { nestLogger } from './nest-logger.js';
