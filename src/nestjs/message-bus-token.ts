import type { MessageBus as HarrierMessageBus } from '../bus/message-bus.js';

/**
 * The bus as a Nest injection token and type: `constructor(private readonly bus: MessageBus)`
 * injects the bus of `HarrierModule`, as `CommandBus` does with `@nestjs/cqrs`.
 *
 * @remarks
 * Its type is Harrier's `MessageBus`; the class only names the provider for Nest, which reads
 * constructor types from `emitDecoratorMetadata`. It is not the bus's class (`instanceof` is false):
 * where the metadata is not emitted (tsx, esbuild, Vitest), use `@InjectBus()`.
 * @example
 * ```ts
 * @Controller('orders')
 * export class OrdersController {
 *   constructor(private readonly bus: MessageBus) {}
 * }
 * ```
 */
// A class for the token, an interface for the type: the one name users know from `harrier`.
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export abstract class MessageBus {}

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type
export interface MessageBus extends HarrierMessageBus {}
