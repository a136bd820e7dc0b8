import { randomUUID } from 'node:crypto';
import { HarrierError } from '../errors/harrier-error.js';
import {
  projectionRebuiltError,
  REQUESTED_REBUILD_PREFIX,
  type Checkpoint,
  type CheckpointStore,
  type CommitOptions,
  type ProjectionGeneration,
} from './checkpoint-store.js';

/**
 * A {@link CheckpointStore} held in process memory, for tests and single-process applications.
 *
 * @remarks
 * Checkpoints are lost when the process ends. A commit never lowers a stored value; only `reset`
 * and `beginRebuild` remove a projection's checkpoints (and raise its generation).
 */
export class InMemoryCheckpointStore implements CheckpointStore {
  /** projection -> `${partition}:${topic}` -> checkpoint. */
  readonly #byProjection = new Map<string, Map<string, Checkpoint>>();
  /** projection -> its generation and marker (only projections ever rebuilt or reset). */
  readonly #generations = new Map<string, ProjectionGeneration>();

  get(projection: string, topic: string, partition: number): Promise<number | undefined> {
    return Promise.resolve(this.#byProjection.get(projection)?.get(keyOf(topic, partition))?.offset);
  }

  /**
   * @throws HarrierError `invalid-argument` when `offset` is not a whole number from 0,
   *   `projection-rebuilt` when `options.generation` is stale or a rebuild is under way.
   */
  commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
    options?: CommitOptions,
  ): Promise<number> {
    if (!Number.isInteger(offset) || offset < 0) {
      return Promise.reject(
        new HarrierError(
          'invalid-argument',
          `Checkpoint offset for projection "${projection}" on "${topic}"/${partition} is ${offset}: commit a whole number from 0 (the last offset completed)`,
        ),
      );
    }
    if (options?.generation !== undefined) {
      const stored = this.#generationOf(projection);
      if (stored.generation !== options.generation || stored.rebuild !== undefined) {
        return Promise.reject(
          projectionRebuiltError(projection, options.generation, {
            generation: stored.generation,
            rebuilding: stored.rebuild !== undefined,
          }),
        );
      }
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

  async reset(projection: string): Promise<void> {
    await this.beginRebuild(projection, `${REQUESTED_REBUILD_PREFIX}${randomUUID()}`, Date.now());
  }

  generation(projection: string): Promise<ProjectionGeneration> {
    return Promise.resolve(this.#generationOf(projection));
  }

  /** @remarks Sorted by projection. */
  generations(): Promise<ProjectionGeneration[]> {
    return Promise.resolve(
      [...this.#generations.values()].sort((a, b) => compare(a.projection, b.projection)),
    );
  }

  beginRebuild(
    projection: string,
    id: string,
    nowMs: number,
    replacing?: string,
  ): Promise<ProjectionGeneration | undefined> {
    const stored = this.#generationOf(projection);
    if (replacing !== undefined && stored.rebuild?.id !== replacing) return Promise.resolve(undefined);
    const next: ProjectionGeneration = Object.freeze({
      projection,
      generation: stored.generation + 1,
      rebuild: Object.freeze({ id, startedAt: nowMs }),
    });
    this.#generations.set(projection, next);
    this.#byProjection.delete(projection);
    return Promise.resolve(next);
  }

  endRebuild(projection: string, id: string): Promise<boolean> {
    const stored = this.#generationOf(projection);
    if (stored.rebuild?.id !== id) return Promise.resolve(false);
    this.#generations.set(projection, Object.freeze({ ...stored, rebuild: undefined }));
    return Promise.resolve(true);
  }

  #generationOf(projection: string): ProjectionGeneration {
    return this.#generations.get(projection) ?? { projection, generation: 0, rebuild: undefined };
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
