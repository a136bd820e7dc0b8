/**
 * The in-memory state of one `FileEventLog` partition, shared by the log and its recovery.
 *
 * @remarks
 * Internal to src/log; only the {@link FileEventLogLostOffsets} type is exported from an index.
 *
 * @packageDocumentation
 */
import type { FileHandle } from 'node:fs/promises';
import type { WakeList } from '../clock/wake-list.js';
import type { HarrierError } from '../errors/harrier-error.js';
import type { AppendAck, AppendInput } from './event-log.js';

/** A run of lost offsets of a partition: records whose bytes were damaged and quarantined. */
export interface FileEventLogLostOffsets {
  /** The first lost offset of the run. */
  readonly from: number;
  /** The last lost offset of the run (inclusive). */
  readonly to: number;
  /** The quarantine file holding the damaged bytes. */
  readonly quarantineFile: string;
}

/** An open segment file, closed once it is replaced and no read uses it any more. */
export interface Segment {
  readonly handle: FileHandle;
  readers: number;
  retired: boolean;
}

/** An append waiting for its partition's next batch. */
export interface PendingAppend {
  readonly input: AppendInput;
  readonly uid: string | undefined;
  readonly resolve: (ack: AppendAck) => void;
  readonly reject: (error: unknown) => void;
}

/** Where a record is: what the id index keeps instead of the record. */
export interface Location {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
}

/** One partition: its file and an index of positions (never bodies) of the retained records. */
export interface PartitionState {
  readonly topic: string;
  readonly partition: number;
  readonly file: string;
  readonly baseFile: string;
  readonly uidsFile: string;
  segment: Segment;
  /** Offset of the first retained record; with no records, the next offset. */
  base: number;
  /** File position of each retained record, in offset order from `base`; lost offsets included. */
  positions: number[];
  /** Runs of lost offsets at or above `base`, in offset order; replaced, never changed in place. */
  lost: readonly FileEventLogLostOffsets[];
  appendedAt: number[];
  ids: string[];
  uids: (string | undefined)[];
  /** Bytes of whole, acknowledged records: where the next batch is written. */
  size: number;
  /** Highest offset whose uid ack is kept in the uids sidecar; -1 for none. */
  uidsThrough: number;
  /** Serializes batches and retention rewrites. */
  chain: Promise<unknown>;
  queue: PendingAppend[];
  flushScheduled: boolean;
  /** Set when an append could not be undone: the partition refuses appends until reopened. */
  failed: HarrierError | undefined;
  readonly waiters: WakeList;
}

/** One line of a uids sidecar: the ack of an idempotent append whose record retention removed. */
export interface UidLine {
  readonly offset: number;
  readonly id: string;
  readonly uid: string;
  readonly appendedAt: number;
}

/** Marks a segment replaced or closed; its handle closes now, or once the last read using it ends. */
export async function retire(segment: Segment): Promise<void> {
  segment.retired = true;
  if (segment.readers === 0) await closeQuietly(segment.handle);
}

export async function closeQuietly(handle: FileHandle): Promise<void> {
  await handle.close().catch(() => undefined);
}
