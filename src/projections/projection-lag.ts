import type { ProjectionLag } from '../dispatch/message-telemetry.js';
import type { Checkpoint } from '../log/checkpoint-store.js';
import type { TopicSpec } from '../log/event-log.js';

/**
 * One projection on one partition as a tool sees it from outside the process: its stored
 * checkpoint, the log's end, and the lag between them.
 */
export interface CheckpointLag extends ProjectionLag {
  /** The last offset completed; undefined when the projection has no checkpoint on this partition. */
  readonly checkpoint: number | undefined;
  /** The partition's length in the log: the offset of its next record. */
  readonly endOffset: number;
  /** When the checkpoint was last raised, ms since the epoch; undefined when unknown. */
  readonly updatedAt: number | undefined;
}

/**
 * Records of a partition appended and not yet completed: the one lag formula of Harrier, used by
 * the {@link ProjectionRunner}'s status and by every tool's {@link checkpointLags}.
 *
 * @param endOffset - the offset the log writes next.
 * @param lastCompleted - the last offset completed, -1 when none.
 */
export function lagBehind(endOffset: number, lastCompleted: number): number {
  // The last completed offset is lastCompleted, so the next one to read is lastCompleted + 1.
  return Math.max(0, endOffset - (lastCompleted + 1));
}

/** What {@link checkpointLags} reads: the stored checkpoints and the event log they are against. */
export interface CheckpointLagSource {
  /** The checkpoints to report, as {@link CheckpointStore.list} returns them. */
  readonly checkpoints: readonly Checkpoint[];
  /** Every (topic, partition) the log has appended to, partitions of each topic ascending. */
  readonly logPartitions: ReadonlyMap<string, readonly number[]>;
  /** The event log with the manifest `topics`: only its `endOffset` is read. */
  readonly log: (topics: readonly TopicSpec[]) => {
    endOffset(topic: string, partition: number): Promise<number>;
  };
}

/**
 * Checkpoint, log end and lag of each projection of `source.checkpoints`, on every partition of the
 * topics it has checkpoints in: the partitions the log has appended to and those with a checkpoint.
 * Sorted by projection, topic and partition.
 *
 * @remarks
 * A tool does not know the application's topics manifest, so the topics and their partitions are
 * discovered from the log and the checkpoints; a partition that never had an append nor a
 * checkpoint does not show (its lag is 0 anyway).
 */
export async function checkpointLags(source: CheckpointLagSource): Promise<CheckpointLag[]> {
  const stored = source.checkpoints;
  const partitionsOf = (topic: string): number[] => {
    const set = new Set(source.logPartitions.get(topic) ?? []);
    for (const cp of stored) if (cp.topic === topic) set.add(cp.partition);
    return [...set].sort((a, b) => a - b);
  };
  const topics = [...new Set(stored.map((cp) => cp.topic))].sort();
  const log = source.log(
    topics.map((name) => ({ name, partitions: Math.max(...partitionsOf(name), 0) + 1 })),
  );
  const ends = new Map<string, number>();
  for (const topic of topics) {
    for (const partition of partitionsOf(topic)) {
      ends.set(`${topic}\u0000${partition}`, await log.endOffset(topic, partition));
    }
  }
  const byProjection = new Map<string, Checkpoint[]>();
  for (const cp of stored) byProjection.set(cp.projection, [...(byProjection.get(cp.projection) ?? []), cp]);
  const rows: CheckpointLag[] = [];
  for (const projection of [...byProjection.keys()].sort()) {
    const own = byProjection.get(projection) ?? [];
    for (const topic of [...new Set(own.map((cp) => cp.topic))].sort()) {
      for (const partition of partitionsOf(topic)) {
        const cp = own.find((c) => c.topic === topic && c.partition === partition);
        const endOffset = ends.get(`${topic}\u0000${partition}`) ?? 0;
        rows.push({
          projection,
          topic,
          partition,
          checkpoint: cp?.offset,
          endOffset,
          lag: lagBehind(endOffset, cp?.offset ?? -1),
          updatedAt: cp === undefined || cp.updatedAt === 0 ? undefined : cp.updatedAt,
        });
      }
    }
  }
  return rows;
}
