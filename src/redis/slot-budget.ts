/**
 * A receiver's slot budget: how many jobs it may hold (fetched from Redis and locked, not yet
 * settled) across all of its queues at once.
 *
 * @remarks
 * Each of the receiver's workers takes a slot before it fetches a job and gives it back once the job
 * has left its hands. Slots are granted in the order they were asked for, and a worker asks again only
 * after its previous fetch, so the queues with work take turns and none starves. Closing the budget
 * answers every wait with "no slot"; once closed it grants nothing and counts nothing.
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

  /** Resolves true once a slot is taken, or false when the budget is (or gets) closed. */
  acquire(): Promise<boolean> {
    if (this.#closed) return Promise.resolve(false);
    if (this.#held < this.#size && this.#waiting.length === 0) {
      this.#held++;
      return Promise.resolve(true);
    }
    return new Promise<boolean>((resolve) => {
      this.#waiting.push(resolve);
    });
  }

  /** Takes a slot only if one is free now and nobody waits for one (so waiters keep their turn). */
  tryAcquire(): boolean {
    if (this.#closed || this.#held >= this.#size || this.#waiting.length > 0) return false;
    this.#held++;
    return true;
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
