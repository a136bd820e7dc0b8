/** A FIFO of defined values that producers push into and one consumer awaits, ending when closed. */
export class AsyncInbox<T> {
  readonly #items: T[] = [];
  #head = 0;
  /** Resolves the waiting `next()`; only ever set while no item waits. */
  #waiter: ((item: T | undefined) => void) | undefined;
  /** The signal the waiting `next()` was given: only its abort ends that wait. */
  #waiterSignal: AbortSignal | undefined;
  #closed = false;
  #watched: AbortSignal | undefined;
  readonly #closing = new AbortController();

  push(item: T): void {
    const waiter = this.#waiter;
    if (waiter === undefined) {
      this.#items.push(item);
      return;
    }
    // Handed straight to the waiting `next()`: its promise resolves with the item, no hop through the array.
    this.#waiter = undefined;
    waiter(item);
  }

  close(): void {
    this.#closed = true;
    this.#closing.abort();
    this.#end();
  }

  /** Aborted when the inbox closes. */
  get closedSignal(): AbortSignal {
    return this.#closing.signal;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Takes every item not yet taken. */
  drain(): T[] {
    const rest = this.#items.slice(this.#head);
    this.#items.length = 0;
    this.#head = 0;
    return rest;
  }

  /** The next item if one is waiting, else undefined; never waits. */
  take(): T | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head] as T;
    // Cleared at once: a taken item kept in the array until the next compaction would outlive its
    // delivery and be promoted to the old generation by every scavenge meanwhile.
    this.#items[this.#head] = undefined as T;
    this.#head++;
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items.splice(0, this.#head);
      this.#head = 0;
    }
    return item;
  }

  /** The next item, or undefined once closed and empty, or when `signal` aborts. */
  next(signal?: AbortSignal): Promise<T | undefined> {
    if (signal !== undefined && signal !== this.#watched) {
      // One listener per signal, not one per wait: a busy inbox waits once per item.
      this.#watched = signal;
      signal.addEventListener(
        'abort',
        () => {
          // A signal watched before this one, or a wait given no signal, is not this abort's to end.
          if (this.#watched === signal && this.#waiterSignal === signal) this.#end();
        },
        { once: true },
      );
    }
    const item = this.take();
    if (item !== undefined) return Promise.resolve(item);
    if (this.#closed || signal?.aborted === true) return Promise.resolve(undefined);
    this.#waiterSignal = signal;
    return new Promise<T | undefined>((resolve) => {
      this.#waiter = resolve;
    });
  }

  /** Ends the waiting `next()` with undefined: nothing is in the inbox while one waits. */
  #end(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.(undefined);
  }
}
