/**
 * The source of time for everything time-based in Harrier (backoff, delays, retention).
 *
 * @remarks
 * Injected rather than read from `Date.now()` so tests can drive time with a {@link ManualClock}.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /**
   * Calls `callback` once, `delayMs` from now; returns a function that cancels it.
   */
  setTimer(delayMs: number, callback: () => void): () => void;
}

/**
 * The wall clock: `Date.now()` and `setTimeout` (unref'd so a timer never keeps a process alive).
 *
 * @remarks
 * Node's `setTimeout` may fire a millisecond before `Date.now()` reaches the due time; the timer
 * re-arms for the rest, so a callback never runs while `now()` is still before its due time (a
 * message delayed until T must not be delivered at T - 1).
 */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(delayMs, callback) {
    const dueAt = Date.now() + Math.max(0, delayMs);
    let handle: NodeJS.Timeout;
    const arm = (ms: number): void => {
      handle = setTimeout(fire, ms);
      handle.unref();
    };
    const fire = (): void => {
      const remaining = dueAt - Date.now();
      if (remaining > 0) arm(remaining);
      else callback();
    };
    arm(Math.max(0, delayMs));
    return () => {
      clearTimeout(handle);
    };
  },
};
