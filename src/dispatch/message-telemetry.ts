import type { TraceparentProvider } from '../messages/prepare-message.js';
import type { Middleware } from './middleware.js';

/**
 * What a telemetry integration hands the bus: middleware around every handler call, and the
 * traceparent of every message the bus or a handler prepares.
 *
 * @remarks
 * The contract knows nothing of OpenTelemetry, so the bus never loads it: `harrierTracing()` from
 * `harrier/telemetry` makes one (see docs/telemetry.md).
 */
export interface MessageTelemetry {
  /** Runs outermost, before the bus's `middleware`. */
  readonly middleware: Middleware;
  /** Called as each outgoing message is prepared, in the sender's async context. */
  readonly traceparent: TraceparentProvider;
}
