/** A binary min-heap of numbers: the ready items, lowest index first. */
class MinHeap {
  readonly #items: number[] = [];

  get size(): number {
    return this.#items.length;
  }

  push(value: number): void {
    const items = this.#items;
    items.push(value);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if ((items[parent] ?? 0) <= value) break;
      items[i] = items[parent] ?? 0;
      i = parent;
    }
    items[i] = value;
  }

  pop(): number | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length === 0 || last === undefined) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && (items[right] ?? 0) < (items[left] ?? 0) ? right : left;
      if ((items[child] ?? 0) >= last) break;
      items[i] = items[child] ?? 0;
      i = child;
    }
    items[i] = last;
    return top;
  }
}

/**
 * Runs `run(i)` for every index of `lanes`, at most `concurrency` at a time and never two items of the
 * same lane at once: each lane's items run one after the other in index order, different lanes in
 * parallel. Whenever a slot frees, the lowest index that may start goes first, so with a concurrency
 * of 1 the items run exactly in index order.
 *
 * @param lanes - the lane key of each item.
 * @returns resolves once every item has run; if `run` throws, no further item starts and the
 * promise rejects with that error once the running ones have settled.
 */
export function runInLanes(
  lanes: readonly string[],
  concurrency: number,
  run: (index: number) => Promise<void>,
): Promise<void> {
  const waiting = new Map<string, { readonly items: number[]; next: number }>();
  const ready = new MinHeap();
  lanes.forEach((key, index) => {
    const lane = waiting.get(key);
    if (lane === undefined) {
      waiting.set(key, { items: [], next: 0 });
      ready.push(index);
    } else {
      lane.items.push(index);
    }
  });
  return new Promise<void>((resolve, reject) => {
    let running = 0;
    let failure: { readonly error: Error } | undefined;
    const pump = (): void => {
      while (failure === undefined && running < Math.max(1, concurrency)) {
        const index = ready.pop();
        if (index === undefined) break;
        running++;
        run(index).then(
          () => {
            // The lane's next item is ready before the slot frees, so it competes by its index.
            const lane = waiting.get(lanes[index] ?? '');
            const next = lane?.items[lane.next];
            if (lane !== undefined && next !== undefined) {
              lane.next++;
              ready.push(next);
            }
            running--;
            pump();
          },
          (error: unknown) => {
            failure ??= { error: error instanceof Error ? error : new Error(String(error)) };
            running--;
            pump();
          },
        );
      }
      if (running > 0) return;
      if (failure !== undefined) reject(failure.error);
      else if (ready.size === 0) resolve();
    };
    pump();
  });
}
