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

/** The wall clock: `Date.now()` and `setTimeout` (unref'd so a timer never keeps a process alive). */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(delayMs, callback) {
    const handle = setTimeout(callback, Math.max(0, delayMs));
    handle.unref();
    return () => {
      clearTimeout(handle);
    };
  },
};
