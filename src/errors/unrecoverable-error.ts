import { HarrierError } from './harrier-error.js';

/**
 * Throw from a handler to dead-letter the message now, without the remaining retries.
 *
 * @example
 * ```ts
 * if (!order) throw new UnrecoverableError(`Order ${id} does not exist`);
 * ```
 */
export class UnrecoverableError extends HarrierError {
  constructor(message: string, options?: ErrorOptions) {
    super('unrecoverable', message, options);
  }
}
