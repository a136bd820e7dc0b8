import { HarrierError } from '../errors/harrier-error.js';
import type { Checkpoint, CheckpointStore } from './checkpoint-store.js';

/**
 * A {@link CheckpointStore} held in process memory, for tests and single-process applications.
 *
 * @remarks
 * Checkpoints are lost when the process ends. A commit never lowers a stored value; only `reset`
 * removes a projection's checkpoints.
 */
export class InMemoryCheckpointStore implements CheckpointStore {
  /** projection -> `${partition}:${topic}` -> checkpoint. */
  readonly #byProjection = new Map<string, Map<string, Checkpoint>>();

  get(projection: string, topic: string, partition: number): Promise<number | undefined> {
    return Promise.resolve(this.#byProjection.get(projection)?.get(keyOf(topic, partition))?.offset);
  }

  /** @throws HarrierError `invalid-argument` when `offset` is not a whole number from 0. */
  commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
  ): Promise<number> {
    if (!Number.isInteger(offset) || offset < 0) {
      return Promise.reject(
        new HarrierError(
          'invalid-argument',
          `Checkpoint offset for projection "${projection}" on "${topic}"/${partition} is ${offset}: commit a whole number from 0 (the last offset completed)`,
        ),
      );
    }
    let checkpoints = this.#byProjection.get(projection);
    if (checkpoints === undefined) {
      checkpoints = new Map();
      this.#byProjection.set(projection, checkpoints);
    }
    const key = keyOf(topic, partition);
    const stored = checkpoints.get(key);
    if (stored !== undefined && stored.offset >= offset) return Promise.resolve(stored.offset);
    checkpoints.set(key, Object.freeze({ projection, topic, partition, offset, updatedAt: nowMs }));
    return Promise.resolve(offset);
  }

  /** @remarks Sorted by projection, topic and partition. */
  list(projection?: string): Promise<Checkpoint[]> {
    const maps =
      projection === undefined
        ? [...this.#byProjection.values()]
        : [this.#byProjection.get(projection) ?? new Map<string, Checkpoint>()];
    const all = maps.flatMap((checkpoints) => [...checkpoints.values()]);
    all.sort(
      (a, b) => compare(a.projection, b.projection) || compare(a.topic, b.topic) || a.partition - b.partition,
    );
    return Promise.resolve(all);
  }

  reset(projection: string): Promise<void> {
    this.#byProjection.delete(projection);
    return Promise.resolve();
  }

  lowest(topic: string, partition: number): Promise<number | undefined> {
    const key = keyOf(topic, partition);
    let lowest: number | undefined;
    for (const checkpoints of this.#byProjection.values()) {
      const offset = checkpoints.get(key)?.offset;
      if (offset !== undefined && (lowest === undefined || offset < lowest)) lowest = offset;
    }
    return Promise.resolve(lowest);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

const keyOf = (topic: string, partition: number): string => `${partition}:${topic}`;

const compare = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
