/**
 * Runs `work` and returns its result as a promise, so a synchronous throw becomes a rejection, as
 * callers of an async contract (`broker.ack(id).catch(...)`) expect.
 */
export function settle<T>(work: () => T | Promise<T>): Promise<T> {
  return new Promise<T>((resolve) => {
    resolve(work());
  });
}
