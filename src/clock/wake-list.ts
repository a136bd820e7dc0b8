/**
 * Waiters for "something changed": `wait` resolves on the next `wakeAll`, or when the signal aborts.
 *
 * @remarks
 * Shared by the in-memory broker's receivers and the logs' subscriptions, which all sleep until an
 * append, a publish or an abort.
 */
export class WakeList {
  readonly #waiters = new Set<() => void>();

  /** Resolves on the next {@link WakeList.wakeAll}, or at once when `signal` aborts. */
  wait(signal?: AbortSignal): Promise<void> {
    // An abort listener added after the abort would never fire.
    if (signal?.aborted === true) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        this.#waiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      this.#waiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  /** Resolves every pending wait. */
  wakeAll(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }
}
