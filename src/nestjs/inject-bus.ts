import { Inject } from '@nestjs/common';
import { HarrierTokens } from '../bus/tokens.js';

/**
 * Injects the bus of `HarrierModule` into a constructor parameter or property.
 *
 * @remarks
 * Works without `emitDecoratorMetadata` (tsx, esbuild, Vitest). The token is
 * `HarrierTokens.MessageBus`, which `@Inject()` and `moduleRef.get()` take as well.
 * @example
 * ```ts
 * @Controller('orders')
 * export class OrdersController {
 *   constructor(@InjectBus() private readonly bus: MessageBus) {}
 * }
 * ```
 */
export function InjectBus(): PropertyDecorator & ParameterDecorator {
  return Inject(HarrierTokens.MessageBus);
}
