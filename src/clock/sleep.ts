import type { Clock } from './clock.js';

/**
 * Resolves after `ms` on `clock`, or as soon as `signal` aborts (at once when it already has). Never
 * rejects, and leaves no timer or listener behind either way.
 */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  if (ms <= 0 || signal?.aborted === true) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = (): void => {
      cancel();
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const cancel = clock.setTimer(ms, done);
    signal?.addEventListener('abort', done, { once: true });
  });
}
