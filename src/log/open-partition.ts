/**
 * Opening a `FileEventLog` from disk: topic directories, the scan of each partition's segment into
 * its indexes, and the repair of what the scan found damaged (torn tails cut, damaged bytes
 * quarantined as lost offsets).
 *
 * @remarks
 * Internal to src/log; only the {@link FileEventLogRepair} type is exported from an index.
 *
 * @packageDocumentation
 */
import { createHash } from 'node:crypto';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Clock } from '../clock/clock.js';
import { WakeList } from '../clock/wake-list.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { Logger } from '../logging/logger.js';
import type { AppendAck, TopicSpec } from './event-log.js';
import {
  closeQuietly,
  type FileEventLogLostOffsets,
  type Location,
  type PartitionState,
  type UidLine,
} from './partition-state.js';
import {
  describeError,
  encodeFrame,
  lostRecord,
  openReadWrite,
  scanSegment,
  syncDirectory,
  writeFileAtomic,
  writeNewFile,
  writeParts,
  type SegmentDamage,
} from './segment-file.js';

/** A range of damaged bytes in a segment that {@link FileEventLog.open} repaired. */
export interface FileEventLogRepair {
  /** The topic of the repaired segment. */
  readonly topic: string;
  /** The partition of the repaired segment. */
  readonly partition: number;
  /** The segment file. */
  readonly file: string;
  /**
   * `torn-tail`: the segment ended in bytes that are no record in sequence, and no valid record
   * follows them; they were cut off, and the next append takes the offset they would have held.
   * `corrupt-frames`: damaged bytes inside the segment, followed by valid records; they were taken
   * out of the segment and each offset they held is kept as a lost offset, so the records after
   * them keep their offsets.
   */
  readonly kind: 'torn-tail' | 'corrupt-frames';
  /** Bytes of the segment before the damaged ones, kept as they were (positions as found). */
  readonly keptBytes: number;
  /** Damaged bytes taken out of the segment. */
  readonly droppedBytes: number;
  /**
   * The offsets whose records were in the damaged bytes (inclusive range), now lost offsets that
   * reads skip; undefined for a torn tail, and for damaged bytes that held no offset.
   */
  readonly lostOffsets: { readonly from: number; readonly to: number } | undefined;
  /**
   * The file (next to the segment) holding a copy of the dropped bytes, with `<file>.json` saying
   * where they came from; undefined for a torn write (a frame cut off by the end of the file, or
   * zeros), which is what a crash during an append leaves.
   */
  readonly quarantineFile: string | undefined;
}

/** The longest topic directory name before it is shortened with a hash. */
const MAX_DIRECTORY_NAME = 200;

/**
 * The directory name of a topic: URI-encoded, a leading dot escaped (no `.`, `..` or hidden names),
 * shortened with a hash when too long for a file system.
 */
export function topicDirectoryName(topic: string): string {
  const encoded = encodeURIComponent(topic).replace(/^\./, '%2E');
  if (encoded.length <= MAX_DIRECTORY_NAME) return encoded;
  const hash = createHash('sha256').update(topic, 'utf8').digest('hex').slice(0, 16);
  return `${encoded.slice(0, MAX_DIRECTORY_NAME - 17)}~${hash}`;
}

/** Creates a topic's directory and `topic.json`, or checks an existing one against the manifest. */
export async function prepareTopicDirectory(
  topicDir: string,
  spec: TopicSpec,
  fsync: boolean,
): Promise<void> {
  await mkdir(topicDir, { recursive: true });
  const manifestFile = join(topicDir, 'topic.json');
  let stored: unknown;
  try {
    stored = JSON.parse(await readFile(manifestFile, 'utf8'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new HarrierError(
        'log-corrupt',
        `${manifestFile} is not readable JSON (${describeError(error)}): restore it as {"name":"${spec.name}","partitions":${spec.partitions}}`,
        { cause: error },
      );
    }
    await writeFileAtomic(
      manifestFile,
      `${JSON.stringify({ name: spec.name, partitions: spec.partitions })}\n`,
      fsync,
    );
    return;
  }
  const { name, partitions } = (stored ?? {}) as { name?: unknown; partitions?: unknown };
  if (name !== spec.name) {
    throw new HarrierError(
      'invalid-topic',
      `Topic "${spec.name}" maps to directory ${topicDir}, which holds topic "${String(name)}" (a case-insensitive file system?): rename one of the topics`,
    );
  }
  if (partitions !== spec.partitions) {
    throw new HarrierError(
      'invalid-topic',
      `Topic "${spec.name}" was created in ${topicDir} with ${String(partitions)} partitions and the manifest says ${spec.partitions}: a partition count is fixed, since keys would move to other partitions; put ${String(partitions)} back in the manifest`,
    );
  }
}

/**
 * Opens one partition's segment, scans it, repairs what the scan found damaged (see
 * {@link repairSegment}) and fills the indexes.
 */
export async function openPartition(
  where: {
    readonly topicDir: string;
    readonly topic: string;
    readonly partition: number;
    /** The names in `topicDir`, so files that are not there cost no system call. */
    readonly existing: ReadonlySet<string>;
    readonly fsync: boolean;
    readonly clock: Clock;
    readonly logger: Logger;
  },
  byId: Map<string, Location>,
  byUid: Map<string, AppendAck>,
  repairs: FileEventLogRepair[],
): Promise<PartitionState> {
  const { topicDir, topic, partition, existing, fsync } = where;
  const name = `p${partition}`;
  const file = join(topicDir, `${name}.log`);
  const baseFile = join(topicDir, `${name}.base`);
  const uidsFile = join(topicDir, `${name}.uids`);
  // Leftovers of a rewrite (retention or repair) cut short by a crash: the originals are intact.
  for (const leftover of [`${name}.log.tmp`, `${name}.base.tmp`]) {
    if (existing.has(leftover)) await rm(join(topicDir, leftover), { force: true });
  }
  const storedBase = existing.has(`${name}.base`) ? await readBase(baseFile) : 0;
  const uidsThrough = existing.has(`${name}.uids`)
    ? await loadUids(uidsFile, topic, partition, byUid, fsync)
    : -1;
  let handle = await openReadWrite(file);
  const state: PartitionState = {
    topic,
    partition,
    file,
    baseFile,
    uidsFile,
    segment: { handle, readers: 0, retired: false },
    base: storedBase,
    positions: [],
    lost: [],
    appendedAt: [],
    ids: [],
    uids: [],
    size: 0,
    uidsThrough,
    chain: Promise.resolve(),
    queue: [],
    flushScheduled: false,
    failed: undefined,
    waiters: new WakeList(),
  };
  try {
    let { size } = await handle.stat();
    const damage = await indexSegment(state, storedBase, size, byId, byUid);
    if (damage.length > 0) {
      let repaired: FileEventLogRepair[];
      try {
        repaired = await repairSegment(where, state, size, damage);
      } catch (error) {
        throw new HarrierError(
          'log-corrupt',
          `${file} holds damaged bytes from byte ${damage[0]?.start ?? 0}, and repairing them failed (${describeError(error)}): fix the cause (disk full? permissions?) and open the log again, which repeats the repair`,
          { cause: error },
        );
      }
      for (const repair of repaired) {
        repairs.push(repair);
        reportRepair(where.logger, repair);
      }
      handle = state.segment.handle;
      size = (await handle.stat()).size;
      if (damage.some((range) => range.nextOffset !== undefined)) {
        // The segment was rewritten: index it again, positions after the damage moved.
        const left = await indexSegment(state, storedBase, size, byId, byUid);
        if (left.length > 0) {
          throw new HarrierError(
            'log-corrupt',
            `${file} is still damaged at byte ${left[0]?.start ?? 0} after its repair: the disk may be failing; copy the directory elsewhere and open the copy`,
          );
        }
      }
    }
    state.size = size;
  } catch (error) {
    await closeQuietly(handle);
    throw error;
  }
  return state;
}

/** Scans a partition's segment into its (emptied) indexes; returns the damage the scan found. */
async function indexSegment(
  state: PartitionState,
  storedBase: number,
  size: number,
  byId: Map<string, Location>,
  byUid: Map<string, AppendAck>,
): Promise<SegmentDamage[]> {
  const { topic, partition } = state;
  state.base = storedBase;
  state.positions = [];
  state.appendedAt = [];
  state.ids = [];
  state.uids = [];
  const lost: FileEventLogLostOffsets[] = [];
  const dir = dirname(state.file);
  const damage = await scanSegment(state.segment.handle, size, storedBase, (record, position) => {
    // The first record's offset wins over the base file: a crash between writing the base and
    // renaming the rewritten segment leaves a base above it.
    if (state.positions.length === 0) state.base = record.offset;
    state.positions.push(position);
    state.appendedAt.push(record.appendedAt);
    state.ids.push(record.id);
    state.uids.push(record.uid);
    if (record.lost !== undefined) {
      const quarantineFile = join(dir, record.lost);
      const last = lost.at(-1);
      if (last?.to === record.offset - 1 && last.quarantineFile === quarantineFile) {
        lost[lost.length - 1] = { ...last, to: record.offset };
      } else {
        lost.push({ from: record.offset, to: record.offset, quarantineFile });
      }
      return;
    }
    if (!byId.has(record.id)) byId.set(record.id, { topic, partition, offset: record.offset });
    if (record.uid !== undefined && !byUid.has(record.uid)) {
      byUid.set(record.uid, ackOf(topic, partition, record.offset, record.id, record.uid, record.appendedAt));
    }
  });
  state.lost = lost;
  return damage;
}

/**
 * Repairs the damage a scan found in a partition's segment, whose records up to the first damaged
 * byte are indexed in `state`.
 *
 * @remarks
 * Order matters for a crash in between: each damaged range is first copied to a quarantine file
 * (flushed, with its directory), never overwriting one; then a tail is cut off, or, when damage lies
 * inside the segment, the segment is rewritten to a temp file (flushed) with a lost-offset marker in
 * place of each damaged range, and renamed over the old one. A crash before the rename leaves the
 * old segment, which the next open repairs again (into a quarantine file of its own).
 */
async function repairSegment(
  where: { readonly topicDir: string; readonly fsync: boolean; readonly clock: Clock },
  state: PartitionState,
  size: number,
  damage: readonly SegmentDamage[],
): Promise<FileEventLogRepair[]> {
  const { topicDir, fsync, clock } = where;
  const { topic, partition, file } = state;
  const handle = state.segment.handle;
  const repairs: FileEventLogRepair[] = [];
  for (const range of damage) {
    const tail = range.nextOffset === undefined;
    const lostOffsets =
      range.nextOffset !== undefined && range.nextOffset > range.expectedOffset
        ? { from: range.expectedOffset, to: range.nextOffset - 1 }
        : undefined;
    const quarantineFile =
      tail && range.tornWrite
        ? undefined
        : await quarantine(handle, range, {
            topicDir,
            stem: `p${partition}.${range.expectedOffset}`,
            fsync,
            facts: {
              topic,
              partition,
              segment: file,
              kind: tail ? 'torn-tail' : 'corrupt-frames',
              start: range.start,
              end: range.end,
              bytes: range.end - range.start,
              expectedOffset: range.expectedOffset,
              lostOffsets: lostOffsets ?? null,
              nextOffset: range.nextOffset ?? null,
              quarantinedAt: new Date(clock.now()).toISOString(),
            },
          });
    repairs.push({
      topic,
      partition,
      file,
      kind: tail ? 'torn-tail' : 'corrupt-frames',
      keptBytes: range.start,
      droppedBytes: range.end - range.start,
      lostOffsets,
      quarantineFile,
    });
  }
  if (fsync && repairs.some((repair) => repair.quarantineFile !== undefined)) await syncDirectory(topicDir);

  const tail = damage.find((range) => range.nextOffset === undefined);
  if (!damage.some((range) => range.nextOffset !== undefined)) {
    if (tail !== undefined) {
      await handle.truncate(tail.start);
      if (fsync) await handle.datasync();
    }
    return repairs;
  }
  const parts: (readonly [number, number] | Uint8Array)[] = [];
  let at = 0;
  damage.forEach((range, index) => {
    if (range === tail) return;
    parts.push([at, range.start]);
    const { lostOffsets, quarantineFile } = repairs[index] ?? {};
    if (lostOffsets !== undefined && quarantineFile !== undefined) {
      const name = basename(quarantineFile);
      for (let offset = lostOffsets.from; offset <= lostOffsets.to; offset++) {
        parts.push(encodeFrame(lostRecord(offset, range.nextAppendedAt ?? 0, name)));
      }
    }
    at = range.end;
  });
  parts.push([at, tail?.start ?? size]);
  const tmp = `${file}.tmp`;
  await writeParts(handle, parts, tmp, fsync);
  await rename(tmp, file);
  if (fsync) await syncDirectory(topicDir);
  state.segment = { handle: await openReadWrite(file), readers: 0, retired: false };
  await closeQuietly(handle);
  return repairs;
}

/** What a quarantine's `.json` file says about its bytes. */
interface QuarantineFacts {
  readonly topic: string;
  readonly partition: number;
  readonly segment: string;
  readonly kind: FileEventLogRepair['kind'];
  readonly start: number;
  readonly end: number;
  readonly bytes: number;
  readonly expectedOffset: number;
  readonly lostOffsets: { readonly from: number; readonly to: number } | null;
  readonly nextOffset: number | null;
  readonly quarantinedAt: string;
}

/**
 * Copies a damaged range of a segment to `<stem>.quarantine` in the topic directory (the exact bytes)
 * and its facts to `<stem>.quarantine.json`; when either exists, to `<stem>.2.quarantine`, and so on,
 * so no quarantine is ever overwritten. Returns the quarantine file.
 */
async function quarantine(
  handle: FileHandle,
  range: SegmentDamage,
  how: {
    readonly topicDir: string;
    readonly stem: string;
    readonly fsync: boolean;
    readonly facts: QuarantineFacts;
  },
): Promise<string> {
  for (let n = 1; ; n++) {
    const bytesFile = join(how.topicDir, `${how.stem}${n === 1 ? '' : `.${n}`}.quarantine`);
    const factsFile = `${bytesFile}.json`;
    try {
      await writeNewFile(factsFile, `${JSON.stringify(how.facts, null, 2)}\n`, how.fsync);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw error;
    }
    try {
      await writeParts(handle, [[range.start, range.end]], bytesFile, how.fsync, true);
    } catch (error) {
      // Ours only: the facts just written. A bytes file already there (its facts lost) stays.
      await rm(factsFile, { force: true });
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw error;
    }
    return bytesFile;
  }
}

/** Tells the logger about one repair: a warning when records were lost or bytes quarantined. */
function reportRepair(logger: Logger, repair: FileEventLogRepair): void {
  const fields = {
    topic: repair.topic,
    partition: repair.partition,
    file: repair.file,
    kind: repair.kind,
    position: repair.keptBytes,
    droppedBytes: repair.droppedBytes,
    lostOffsets: repair.lostOffsets,
    quarantineFile: repair.quarantineFile,
  };
  const where = `topic "${repair.topic}" partition ${repair.partition}`;
  if (repair.kind === 'corrupt-frames') {
    const lost =
      repair.lostOffsets === undefined
        ? 'no offset was lost'
        : `offsets ${repair.lostOffsets.from} to ${repair.lostOffsets.to} are lost (reads skip them)`;
    logger.warn(
      `FileEventLog: ${repair.droppedBytes} damaged bytes inside the segment of ${where} were moved to ${String(repair.quarantineFile)}; ${lost}, the records after them keep their offsets`,
      fields,
    );
  } else if (repair.quarantineFile !== undefined) {
    logger.warn(
      `FileEventLog: the segment of ${where} ended in ${repair.droppedBytes} bytes that are no valid record; they were cut off and copied to ${repair.quarantineFile}`,
      fields,
    );
  } else {
    logger.info(
      `FileEventLog: cut a torn write of ${repair.droppedBytes} bytes off the end of the segment of ${where}`,
      fields,
    );
  }
}

async function readBase(baseFile: string): Promise<number> {
  let text: string;
  try {
    text = await readFile(baseFile, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
  const base = Number(text.trim());
  if (!Number.isSafeInteger(base) || base < 0) {
    throw new HarrierError(
      'log-corrupt',
      `${baseFile} holds "${text.trim()}", not an offset: write the offset of the partition's first retained record (or its next offset when empty) into it`,
    );
  }
  return base;
}

/**
 * Loads a uids sidecar into `byUid`; returns the highest offset in it. A torn last line (a crash
 * mid-write) is cut off so the next write starts on a line of its own.
 */
async function loadUids(
  uidsFile: string,
  topic: string,
  partition: number,
  byUid: Map<string, AppendAck>,
  fsync: boolean,
): Promise<number> {
  let text: string;
  try {
    text = await readFile(uidsFile, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return -1;
    throw error;
  }
  let through = -1;
  let whole = 0;
  for (const line of text.split('\n').slice(0, -1)) {
    let parsed: UidLine;
    try {
      parsed = JSON.parse(line) as UidLine;
    } catch {
      break;
    }
    byUid.set(parsed.uid, ackOf(topic, partition, parsed.offset, parsed.id, parsed.uid, parsed.appendedAt));
    through = Math.max(through, parsed.offset);
    whole += Buffer.byteLength(line, 'utf8') + 1;
  }
  if (whole < Buffer.byteLength(text, 'utf8')) {
    const handle = await open(uidsFile, 'r+');
    try {
      await handle.truncate(whole);
      if (fsync) await handle.datasync();
    } finally {
      await handle.close();
    }
  }
  return through;
}

function ackOf(
  topic: string,
  partition: number,
  offset: number,
  id: string,
  uid: string,
  appendedAt: number,
): AppendAck {
  return Object.freeze({ topic, partition, offset, id, uid, appendedAt, duplicate: false });
}
