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
 * Durable checkpoints per (projection, topic, partition): the contract every store implements and
 * the conformance suite checks.
 *
 * @remarks
 * A commit never lowers a stored value: committing a lower offset leaves the higher one and returns
 * it. Only `reset` (a rebuild) goes back, and it removes the projection's checkpoints entirely.
 */
export interface CheckpointStore {
  /** The stored offset, or undefined when the projection has none in that partition. */
  get(projection: string, topic: string, partition: number): Promise<number | undefined>;
  /** Raises the checkpoint to `offset` unless it is already higher; returns the stored value. */
  commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
  ): Promise<number>;
  /** Every checkpoint of a projection (or of all projections). */
  list(projection?: string): Promise<Checkpoint[]>;
  /** Removes every checkpoint of a projection (for a rebuild). */
  reset(projection: string): Promise<void>;
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
