import { HarrierError } from '../errors/harrier-error.js';

/** One stored checkpoint: the last offset a projection completed in a partition. */
export interface Checkpoint {
  readonly projection: string;
  readonly topic: string;
  readonly partition: number;
  /** The highest offset completed, with every lower offset completed too. */
  readonly offset: number;
  /** When it was last raised, ms since the epoch. */
  readonly updatedAt: number;
}

/**
 * How the id of a rebuild asked from outside ({@link CheckpointStore.reset}) begins: no runner works
 * on it yet, so a runner takes it over at once, where it waits a while for a runner's own rebuild.
 */
export const REQUESTED_REBUILD_PREFIX = 'requested:';

/** Whether a marker is one {@link CheckpointStore.reset} set (asked from outside, no runner on it). */
export function isRequestedRebuild(marker: RebuildMarker): boolean {
  return marker.id.startsWith(REQUESTED_REBUILD_PREFIX);
}

/** A rebuild under way: set before a projection's checkpoints go, cleared once its `reset()` succeeded. */
export interface RebuildMarker {
  /** Names this rebuild: only it clears the marker ({@link CheckpointStore.endRebuild}). */
  readonly id: string;
  /** When the rebuild began, ms since the epoch. */
  readonly startedAt: number;
}

/** A projection's generation and rebuild marker, as {@link CheckpointStore.generation} reads them. */
export interface ProjectionGeneration {
  readonly projection: string;
  /** Raised by every rebuild (and `reset`); 0 for a projection never rebuilt. */
  readonly generation: number;
  /** Set while a rebuild is under way (or was cut short by a crash); undefined otherwise. */
  readonly rebuild: RebuildMarker | undefined;
}

/** Options of {@link CheckpointStore.commit}. */
export interface CommitOptions {
  /**
   * Commit only while the projection is at this generation and no rebuild is under way; otherwise
   * reject with HarrierError `projection-rebuilt` and change nothing.
   * @defaultValue none: the commit is not conditional
   */
  readonly generation?: number;
}

/**
 * Durable checkpoints per (projection, topic, partition), with a generation and a rebuild marker per
 * projection: the contract every store implements and the conformance suite checks.
 *
 * @remarks
 * A commit never lowers a stored value: committing a lower offset leaves the higher one and returns
 * it. Only `reset` and `beginRebuild` go back: they remove the projection's checkpoints entirely and
 * raise its generation, so a runner that started at the old generation cannot commit any more (a
 * commit given `generation` is refused). See docs/projections.md for the order of a rebuild.
 */
export interface CheckpointStore {
  /** The stored offset, or undefined when the projection has none in that partition. */
  get(projection: string, topic: string, partition: number): Promise<number | undefined>;
  /**
   * Raises the checkpoint to `offset` unless it is already higher; returns the stored value.
   * @throws HarrierError `projection-rebuilt` when `options.generation` is not the projection's
   *   generation or a rebuild is under way (nothing is written).
   */
  commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
    options?: CommitOptions,
  ): Promise<number>;
  /** Every checkpoint of a projection (or of all projections). */
  list(projection?: string): Promise<Checkpoint[]>;
  /**
   * Asks for a rebuild from outside the processes that run the projection (`harrier projections
   * rebuild`): as {@link beginRebuild} with an id of the store's own starting with
   * {@link REQUESTED_REBUILD_PREFIX}, stamped with the wall clock.
   * The marker stays set until a runner has run the projection's `reset()` and cleared it.
   */
  reset(projection: string): Promise<void>;
  /** A projection's generation (0 when never rebuilt) and its rebuild marker, if set. */
  generation(projection: string): Promise<ProjectionGeneration>;
  /** Every projection that was ever rebuilt or reset, or has a rebuild under way, by name. */
  generations(): Promise<ProjectionGeneration[]>;
  /**
   * Begins a rebuild, in one step: sets the marker `{ id, startedAt: nowMs }`, raises the generation
   * and removes every checkpoint of the projection.
   *
   * @param replacing - take over only the rebuild with this id: when the marker is not set or names
   *   another rebuild (someone else took it over, or it ended), nothing changes and undefined is returned.
   * @returns the projection's new generation and marker; undefined when `replacing` did not match.
   */
  beginRebuild(
    projection: string,
    id: string,
    nowMs: number,
    replacing?: string,
  ): Promise<ProjectionGeneration | undefined>;
  /**
   * Clears the rebuild marker when it is the one of rebuild `id` (call it once `reset()` succeeded).
   * @returns false when the marker was not set or belongs to another rebuild (nothing changed).
   */
  endRebuild(projection: string, id: string): Promise<boolean>;
  /** The lowest checkpoint any projection holds in a partition, or undefined when none. */
  lowest(topic: string, partition: number): Promise<number | undefined>;
  close(): Promise<void>;
}

/**
 * Checks an offset given to {@link CheckpointStore.commit}: a whole number from 0.
 * @throws HarrierError `invalid-argument` naming the checkpoint and the rule.
 */
export function checkCheckpointOffset(
  projection: string,
  topic: string,
  partition: number,
  offset: number,
): void {
  if (Number.isSafeInteger(offset) && offset >= 0) return;
  throw new HarrierError(
    'invalid-argument',
    `Checkpoint offset for projection "${projection}" on "${topic}"/${partition} is ${offset}: commit a whole number from 0 (the last offset completed)`,
  );
}

/**
 * The error a commit at a stale generation rejects with.
 * @param stored - the projection's generation now, and its marker.
 */
export function projectionRebuiltError(
  projection: string,
  expected: number,
  stored: Pick<ProjectionGeneration, 'generation'> & { readonly rebuilding: boolean },
): HarrierError {
  return new HarrierError(
    'projection-rebuilt',
    `Projection "${projection}" is at generation ${stored.generation}${stored.rebuilding ? ' with a rebuild under way' : ''}, not ${expected}: its checkpoints were reset (a rebuild elsewhere); the checkpoint was not written. Restart the projection from its new checkpoints`,
  );
}
