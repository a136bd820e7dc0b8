/**
 * Runs async work one at a time per key, in arrival order, within this process.
 *
 * @remarks
 * Keys with nothing queued hold no memory: the last finished holder of a key removes it.
 */
export class KeyedLock {
  readonly #tails = new Map<string, Promise<void>>();

  /** Runs `work` once every earlier `run` with the same key has settled; resolves to its result. */
  async run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key);
    let release!: () => void;
    const mine = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tail = previous === undefined ? mine : previous.then(() => mine);
    this.#tails.set(key, tail);
    try {
      if (previous !== undefined) await previous;
      return await work();
    } finally {
      release();
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    }
  }

  /** Keys with work running or queued (for tests). */
  get size(): number {
    return this.#tails.size;
  }
}
