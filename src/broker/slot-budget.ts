/**
 * A receiver's slot budget: how many jobs it may hold (fetched from Redis and locked, not yet
 * settled) across all of its queues at once.
 *
 * @remarks
 * Each of the receiver's workers takes a slot before it fetches a job and gives it back once the job
 * has left its hands, or passes it on to the job it fetches next while nobody waits for a slot
 * ({@link SlotBudget.mayPassOn}). Slots are granted in the order they were asked for, and a worker
 * asks again only after its previous fetch, so the queues with work take turns and none starves.
 * Closing the budget answers every wait with "no slot"; once closed it grants nothing and counts
 * nothing.
 */
export class SlotBudget {
  readonly #size: number;
  #held = 0;
  #closed = false;
  readonly #waiting: ((granted: boolean) => void)[] = [];

  /** @param size - slots in the budget: the receiver's prefetch, at least 1 */
  constructor(size: number) {
    this.#size = Math.max(1, size);
  }

  /** Slots held now. */
  get held(): number {
    return this.#held;
  }

  /**
   * Resolves true once a slot is taken, or false when the budget is (or gets) closed or `signal`
   * aborts the wait first.
   */
  acquire(signal?: AbortSignal): Promise<boolean> {
    if (this.#closed || signal?.aborted === true) return Promise.resolve(false);
    if (this.#held < this.#size && this.#waiting.length === 0) {
      this.#held++;
      return Promise.resolve(true);
    }
    return new Promise<boolean>((resolve) => {
      const waiter = (granted: boolean): void => {
        signal?.removeEventListener('abort', abort);
        resolve(granted);
      };
      const abort = (): void => {
        const at = this.#waiting.indexOf(waiter);
        if (at < 0) return;
        this.#waiting.splice(at, 1);
        resolve(false);
      };
      signal?.addEventListener('abort', abort, { once: true });
      this.#waiting.push(waiter);
    });
  }

  /** Takes a slot only if one is free now and nobody waits for one (so waiters keep their turn). */
  tryAcquire(): boolean {
    if (this.#closed || this.#held >= this.#size || this.#waiting.length > 0) return false;
    this.#held++;
    return true;
  }

  /**
   * Whether a holder may keep its slot for the job it fetches next instead of giving it back: only
   * while the budget is open and nobody waits for a slot, so a busy queue never keeps the budget
   * from the queues waiting their turn.
   */
  mayPassOn(): boolean {
    return !this.#closed && this.#waiting.length === 0;
  }

  /** Gives a slot back; the longest waiter gets it. */
  release(): void {
    if (this.#closed) return;
    const next = this.#waiting.shift();
    if (next !== undefined) next(true);
    else this.#held = Math.max(0, this.#held - 1);
  }

  /** Grants nothing from now on and answers every wait with false. */
  close(): void {
    this.#closed = true;
    for (const waiter of this.#waiting.splice(0)) waiter(false);
  }
}
