import { MAX_TIMER_MS } from '../clock/timeouts.js';
import { HarrierError } from '../errors/harrier-error.js';

/** Default of `handlerTimeoutMs` (createBus): 5 minutes. */
export const DEFAULT_HANDLER_TIMEOUT_MS = 300_000;

/**
 * Checks a handler time-out in ms: a number above 0 and at most 2^31 - 1 (the longest a timer
 * waits; Node fires a longer one after 1 ms, which would time every call out at once).
 *
 * @param where - the option as the user wrote it, e.g. `@CommandHandler(PlaceOrder) timeoutMs`.
 * @throws HarrierError `invalid-option` naming `where` and the values it takes.
 */
export function checkTimeoutMs(value: unknown, where: string): void {
  if (typeof value === 'number' && Number.isFinite(value) && value > 0 && value <= MAX_TIMER_MS) return;
  throw new HarrierError(
    'invalid-option',
    `${where} is ${String(value)}: give a number of milliseconds above 0 and at most ${MAX_TIMER_MS} (about 24.8 days), or leave it out for the default of ${DEFAULT_HANDLER_TIMEOUT_MS} (5 minutes)`,
  );
}
