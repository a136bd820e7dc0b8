import { HarrierError } from './harrier-error.js';

/**
 * Throw from a handler when a dependency of yours is unreachable (an HTTP API down, a service timing
 * out): the endpoint pauses instead of spending the message's attempts.
 *
 * @remarks
 * A transient failure is an outage, not a message failure: the delivery goes back to its queue with
 * its attempt uncounted, the endpoint stops taking messages, and it probes with backoff until a
 * message gets through (see docs/guarantees/outages-pause.md). Harrier classifies its own drivers'
 * connection errors this way already; this class is for the dependencies it cannot see. Wrap the
 * original error as `cause`.
 *
 * @example
 * ```ts
 * const response = await fetch(url, { signal: ctx.signal }).catch((error: unknown) => {
 *   throw new TransientError('The payments API is unreachable', { cause: error });
 * });
 * if (response.status === 503) throw new TransientError('The payments API is down for maintenance');
 * ```
 */
export class TransientError extends HarrierError {
  constructor(message: string, options?: ErrorOptions) {
    super('transient', message, options);
  }
}
