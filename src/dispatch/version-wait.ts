/**
 * How long something written with a newer version than this process knows (a message, or a saga's
 * stored state) is given back to wait for a worker that knows it; then its message is dead-lettered
 * as `version-unsupported` (replay it once the new code is deployed).
 */
export const VERSION_WAIT_MS = 24 * 60 * 60 * 1000;
/** Shortest delay of a message waiting for a newer worker; the delay is a tenth of its wait. */
const VERSION_WAIT_MIN_MS = 1000;
/** Longest delay between two deliveries of a message waiting for a newer worker. */
const VERSION_WAIT_MAX_MS = 5 * 60 * 1000;

/**
 * When a message waiting for a worker that knows a newer version is delivered again, or undefined
 * once it has waited {@link VERSION_WAIT_MS}.
 *
 * @remarks
 * The wait spends no attempt, so the delay grows with `age` (how long the newer version has been
 * waiting): the longer no worker knows it, the less often it is tried.
 * @param age - ms since the newer version was written (a message's `occurredAt`, a state's save).
 */
export function versionWaitRetryAt(age: number, now: number): number | undefined {
  if (!(age < VERSION_WAIT_MS)) return undefined;
  return now + Math.min(Math.max(VERSION_WAIT_MIN_MS, Math.floor(age / 10)), VERSION_WAIT_MAX_MS);
}
