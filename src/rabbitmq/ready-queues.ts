/**
 * The messages a receiver may hand out now, one FIFO list per RabbitMQ queue, taken in turn: each
 * queue with something ready gives one, then waits for the others.
 *
 * @remarks
 * A partition queue reads further ahead than an unordered queue (`partitionPrefetch`), so one list
 * for all would hand out a partition queue's backlog in proportion to its larger window; taken in
 * turn, every queue of the endpoint gets the same share of the handlers, whatever its window.
 */
export class ReadyQueues<T> {
  /** Each queue's ready items; the map's order is the turn (the first goes next). */
  #byQueue = new Map<string, T[]>();
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** Adds `item` behind the other ready items of `queue`. */
  push(queue: string, item: T): void {
    const items = this.#byQueue.get(queue);
    if (items === undefined) this.#byQueue.set(queue, [item]);
    else items.push(item);
    this.#size++;
  }

  /** Puts `item` back in front of `queue`'s items, and `queue` first in turn (it was just taken). */
  unshift(queue: string, item: T): void {
    const items = this.#byQueue.get(queue) ?? [];
    items.unshift(item);
    this.#byQueue = new Map([[queue, items], ...[...this.#byQueue].filter(([name]) => name !== queue)]);
    this.#size++;
  }

  /** Takes the first item of the queue whose turn it is; that queue's turn then comes last. */
  shift(): T | undefined {
    for (const [queue, items] of this.#byQueue) {
      const item = items.shift();
      // One queue with more left: its turn again, with no change to the map.
      if (item !== undefined && items.length > 0 && this.#byQueue.size === 1) {
        this.#size--;
        return item;
      }
      this.#byQueue.delete(queue);
      if (item === undefined) continue;
      if (items.length > 0) this.#byQueue.set(queue, items);
      this.#size--;
      return item;
    }
    return undefined;
  }

  /** Takes `item` out of `queue`'s items; false when it was not there. */
  remove(queue: string, item: T): boolean {
    const items = this.#byQueue.get(queue);
    const index = items?.indexOf(item) ?? -1;
    if (items === undefined || index < 0) return false;
    items.splice(index, 1);
    if (items.length === 0) this.#byQueue.delete(queue);
    this.#size--;
    return true;
  }

  /** Takes out the items `predicate` picks, queue by queue. */
  takeWhere(predicate: (item: T) => boolean): T[] {
    const taken: T[] = [];
    for (const [queue, items] of [...this.#byQueue]) {
      const kept = items.filter((item) => !predicate(item));
      if (kept.length === items.length) continue;
      taken.push(...items.filter(predicate));
      if (kept.length === 0) this.#byQueue.delete(queue);
      else this.#byQueue.set(queue, kept);
    }
    this.#size -= taken.length;
    return taken;
  }

  /** Takes out every item, queue by queue. */
  drain(): T[] {
    const all = [...this.#byQueue.values()].flat();
    this.#byQueue.clear();
    this.#size = 0;
    return all;
  }
}
