import { mkdir, open, readdir, rename } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import { settle } from '../errors/settle.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import type {
  AppendAck,
  AppendInput,
  EventLog,
  LogCapabilities,
  LogRecord,
  MaintenanceOptions,
  SubscribeOptions,
  TopicInfo,
  TopicSpec,
} from './event-log.js';
import { forEachLimited } from './for-each-limited.js';
import {
  openPartition,
  prepareTopicDirectory,
  topicDirectoryName,
  type FileEventLogRepair,
} from './open-partition.js';
import {
  closeQuietly,
  retire,
  type FileEventLogLostOffsets,
  type Location,
  type PartitionState,
  type PendingAppend,
  type UidLine,
} from './partition-state.js';
import { acquireLock, releaseLock } from './pid-lock.js';
import {
  AppendFailure,
  appendAt,
  describeError,
  encodeFrame,
  openReadWrite,
  readFrames,
  syncDirectory,
  writeFileAtomic,
  writeParts,
  type StoredRecord,
} from './segment-file.js';
import {
  checkReadRange,
  checkPartition,
  checkSchema,
  indexTopics,
  partitionFor,
  topicInfo,
  topicOf,
} from './topics.js';

/** Options of {@link FileEventLog.open}. */
export interface FileEventLogOptions {
  /**
   * The directory that holds the log: one subdirectory per topic, one segment file per partition.
   * Created when missing; one process at a time may open it.
   * @defaultValue none; required
   */
  readonly directory: string;
  /**
   * The topics manifest: every topic the log accepts, with its fixed partition count. A topic's
   * partition count cannot change once its directory exists.
   * @defaultValue none; required
   */
  readonly topics: readonly TopicSpec[];
  /**
   * Stamps `appendedAt` on each record, which retention compares against `maintenance(nowMs)`.
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
  /**
   * Flush every append batch to disk (`fdatasync`) before acknowledging it, so acknowledged records
   * survive a power loss or kernel crash, not only a crash of the process.
   * @defaultValue true
   */
  readonly fsync?: boolean;
  /**
   * Where {@link FileEventLog.open} reports the repairs it made: a warning for each range of damaged
   * bytes it quarantined (naming the offsets lost), info for a torn write it cut off.
   * @defaultValue consoleLogger
   */
  readonly logger?: Logger;
}

/** Most records one `read` returns. */
const MAX_READ_BATCH = 1_000;
/** Records a subscription reads from the file at once. */
const SUBSCRIBE_BATCH = 256;
/** Most appends written (and flushed) together in one batch. */
const MAX_APPEND_BATCH = 1_024;
/** Partitions of a topic opened (scanned) at once. */
const OPEN_CONCURRENCY = 32;

/**
 * An {@link EventLog} in a local directory: embedded, durable, for one process.
 *
 * @remarks
 * Layout: `<directory>/<topic>/p<n>.log` per partition (topic names URI-encoded), each an append-only
 * segment of frames `[u32 length][u32 crc32][JSON record]`; `p<n>.base` holds the offset of the first
 * retained record and `p<n>.uids` the acks of idempotent appends that retention removed;
 * `<topic>/topic.json` records the topic's name and partition count.
 *
 * Appends to one partition are written in batches, one write and one `fdatasync` per batch (group
 * commit), and acknowledged only after both. A failed write or flush is truncated back, so the
 * append leaves nothing behind; if even the truncate fails, the partition refuses appends
 * (`partition-failed`) until the log is opened again, which cuts any torn tail off.
 *
 * {@link FileEventLog.open} scans every segment and rebuilds the indexes (offset to file position,
 * event id to location, uid to ack). A torn tail (no valid record after it) is cut back to the last
 * whole record. Damaged bytes inside a segment (valid records after them) are copied to a quarantine
 * file next to the segment, and the offsets they held become lost offsets: the segment is rewritten
 * with a marker frame for each, so the records after them keep their offsets. Both are listed in
 * {@link FileEventLog.repairs} and told to the logger. Reads skip lost offsets
 * ({@link FileEventLog.lostOffsets} lists them). Memory holds positions and ids, never bodies: reads
 * go to the file.
 *
 * Retention (`maintenance`) rewrites a segment without its expired prefix into a temp file and
 * renames it over the old one, after writing the new base offset to `p<n>.base`, so offsets never
 * go back. Appends to that partition wait for the rewrite.
 *
 * `appendIdempotent` returns the first ack of a uid for the life of the directory, like
 * `InMemoryEventLog`: also after a restart, and also after retention removed the record (its ack
 * moves to `p<n>.uids`, about 150 bytes each, loaded into memory on open).
 *
 * One process owns the directory (`shared: false`): open takes `<directory>/.lock`, naming its pid,
 * and refuses while a live process holds it. A lock left behind by a dead process is taken over.
 *
 * @example
 * ```ts
 * const log = await FileEventLog.open({
 *   directory: './data/events',
 *   topics: [{ name: 'orders', partitions: 8, retentionMs: 7 * 24 * 3600_000 }],
 * });
 * const ack = await log.append('orders', { id, key: 'order-1', type: 'orders.OrderPlaced', body });
 * await log.close();
 * ```
 */
export class FileEventLog implements EventLog {
  /** The directory the log lives in, absolute. */
  readonly directory: string;
  /**
   * What `open` repaired: torn tails cut off and damaged bytes quarantined, in topic and partition
   * order; empty after a clean shutdown.
   */
  readonly repairs: readonly FileEventLogRepair[];
  readonly #topics: Map<string, TopicSpec>;
  readonly #clock: Clock;
  readonly #fsync: boolean;
  readonly #capabilities: LogCapabilities;
  readonly #partitions: Map<string, PartitionState[]>;
  readonly #byId: Map<string, Location>;
  readonly #byUid: Map<string, AppendAck>;
  /** Idempotent appends in flight, so a uid appended twice at once lands once. */
  readonly #pendingUids = new Map<string, Promise<AppendAck>>();
  readonly #lockFile: string;
  readonly #lockContent: string;
  #closed = false;
  #closing: Promise<void> | undefined;

  private constructor(init: {
    directory: string;
    topics: Map<string, TopicSpec>;
    clock: Clock;
    fsync: boolean;
    partitions: Map<string, PartitionState[]>;
    byId: Map<string, Location>;
    byUid: Map<string, AppendAck>;
    repairs: FileEventLogRepair[];
    lockFile: string;
    lockContent: string;
  }) {
    this.directory = init.directory;
    this.#topics = init.topics;
    this.#clock = init.clock;
    this.#fsync = init.fsync;
    this.#partitions = init.partitions;
    this.#byId = init.byId;
    this.#byUid = init.byUid;
    this.repairs = Object.freeze(init.repairs);
    this.#lockFile = init.lockFile;
    this.#lockContent = init.lockContent;
    this.#capabilities = Object.freeze({
      durable: true,
      fsync: init.fsync,
      shared: false,
      livePush: true,
      maxReadBatch: MAX_READ_BATCH,
    });
  }

  /**
   * Opens (or creates) the log in `options.directory` and recovers it: every segment is scanned, the
   * indexes rebuilt, a torn tail cut back to the last whole record, and damaged bytes inside a
   * segment quarantined with their offsets kept as lost offsets (see {@link FileEventLog.repairs}).
   *
   * @throws HarrierError `invalid-topic` when the manifest breaks a rule or a topic's partition count
   * differs from the one its directory was created with; `log-locked` when another live process (or
   * this one) has the directory open; `log-corrupt` when a sidecar file cannot be read.
   */
  static async open(options: FileEventLogOptions): Promise<FileEventLog> {
    const topics = indexTopics(options.topics);
    const directory = resolve(options.directory);
    const fsync = options.fsync ?? true;
    const clock = options.clock ?? systemClock;
    const logger = options.logger ?? consoleLogger;
    await mkdir(directory, { recursive: true });
    const lock = await acquireLock(directory);
    const partitions = new Map<string, PartitionState[]>();
    const byId = new Map<string, Location>();
    const byUid = new Map<string, AppendAck>();
    const repairs: FileEventLogRepair[] = [];
    try {
      for (const spec of topics.values()) {
        const topicDir = join(directory, topicDirectoryName(spec.name));
        await prepareTopicDirectory(topicDir, spec, fsync);
        const existing = new Set(await readdir(topicDir));
        const states: PartitionState[] = [];
        partitions.set(spec.name, states);
        await forEachLimited(spec.partitions, OPEN_CONCURRENCY, async (partition) => {
          states[partition] = await openPartition(
            { topicDir, topic: spec.name, partition, existing, fsync, clock, logger },
            byId,
            byUid,
            repairs,
          );
        });
        // New segment files must survive a power loss as entries of their directory too.
        if (fsync) await syncDirectory(topicDir);
      }
      if (fsync) await syncDirectory(directory);
    } catch (error) {
      for (const states of partitions.values()) {
        // Object.values skips the partitions a failed open left as holes.
        for (const state of Object.values(states)) await closeQuietly(state.segment.handle);
      }
      await releaseLock(lock.file, lock.content);
      throw error;
    }
    return new FileEventLog({
      directory,
      topics,
      clock,
      fsync,
      partitions,
      byId,
      byUid,
      // Partitions open concurrently: report them in a stable order.
      repairs: repairs.sort((a, b) => compare(a.topic, b.topic) || a.partition - b.partition),
      lockFile: lock.file,
      lockContent: lock.content,
    });
  }

  /**
   * Appends one record; resolves once it is written (and flushed, with `fsync`).
   * @throws UnknownTopicError; HarrierError `validation-failed`, `log-closed`, `append-failed` (the
   * write failed and was undone: retry) or `partition-failed` (reopen the log).
   */
  append(topic: string, record: AppendInput): Promise<AppendAck> {
    // Queued synchronously, so an append accepted before close() is one close() waits for.
    return settle(() => this.#enqueue(this.#stateForAppend(topic, record), record, undefined));
  }

  /**
   * Appends one record unless `uid` was appended before, in any topic; then returns the first ack
   * with `duplicate: true`.
   *
   * @remarks
   * Uids are remembered for the life of the directory: across restarts and after retention removed
   * the record.
   * @throws as {@link FileEventLog.append}.
   */
  async appendIdempotent(topic: string, uid: string, record: AppendInput): Promise<AppendAck> {
    topicOf(this.#topics, topic);
    for (;;) {
      const first = this.#byUid.get(uid);
      if (first !== undefined) return { ...first, duplicate: true };
      const pending = this.#pendingUids.get(uid);
      if (pending === undefined) break;
      try {
        return { ...(await pending), duplicate: true };
      } catch {
        // The first attempt appended nothing; this one tries on its own.
      }
    }
    const state = this.#stateForAppend(topic, record);
    const appended = this.#enqueue(state, record, uid);
    this.#pendingUids.set(uid, appended);
    try {
      return await appended;
    } finally {
      this.#pendingUids.delete(uid);
    }
  }

  /** @remarks Returns the first ack as it was issued (`duplicate: false`). */
  findByUid(uid: string): Promise<AppendAck | undefined> {
    return Promise.resolve(this.#byUid.get(uid));
  }

  /**
   * @remarks Offsets below the oldest retained record are gone; reading from one starts at the
   * oldest retained record. Lost offsets (see {@link FileEventLog.lostOffsets}) are skipped: the
   * records after them come back with their own offsets, and `max` counts records, not offsets.
   * @throws UnknownTopicError; HarrierError `invalid-partition`, `invalid-argument` or `log-closed`.
   */
  async read(topic: string, partition: number, fromOffset: number, max: number): Promise<LogRecord[]> {
    const state = this.#partition(topic, partition);
    checkReadRange(fromOffset, max, MAX_READ_BATCH);
    this.#assertOpen();
    return (await this.#readRange(state, fromOffset, Math.min(max, MAX_READ_BATCH))).records;
  }

  /**
   * The lost offsets of a partition at or above its oldest retained record: offsets whose records
   * `open` found damaged and quarantined. Reads and subscriptions skip them.
   * @throws UnknownTopicError, HarrierError `invalid-partition`.
   */
  lostOffsets(topic: string, partition: number): Promise<readonly FileEventLogLostOffsets[]> {
    return settle(() => this.#partition(topic, partition).lost);
  }

  /**
   * Yields the records after `afterOffset` from the file, then each new one as it is appended, until
   * `signal` aborts or the log closes.
   * @throws UnknownTopicError, HarrierError `invalid-partition` (when called, not on iteration).
   */
  subscribe(topic: string, options: SubscribeOptions): AsyncIterable<LogRecord> {
    const state = this.#partition(topic, options.partition);
    return this.#follow(state, (options.afterOffset ?? -1) + 1, options.signal);
  }

  /** The record of an event id (the first one appended with it, while it is retained). */
  async getEvent(id: string): Promise<LogRecord | undefined> {
    const location = this.#byId.get(id);
    if (location === undefined || this.#closed) return undefined;
    const state = this.#partition(location.topic, location.partition);
    const [record] = (await this.#readRange(state, location.offset, 1)).records;
    return record?.offset === location.offset ? record : undefined;
  }

  topics(): Promise<TopicInfo[]> {
    return Promise.resolve([...this.#topics.values()].map(topicInfo));
  }

  /** @throws UnknownTopicError */
  partitions(topic: string): Promise<number> {
    return settle(() => topicOf(this.#topics, topic).partitions);
  }

  /** @throws UnknownTopicError, HarrierError `invalid-partition`. */
  endOffset(topic: string, partition: number): Promise<number> {
    return settle(() => {
      const state = this.#partition(topic, partition);
      return state.base + state.positions.length;
    });
  }

  capabilities(): LogCapabilities {
    return this.#capabilities;
  }

  /**
   * Removes, from the front of each partition of a topic with `retentionMs`, every record with
   * `appendedAt + retentionMs <= nowMs`, stopping at the first younger one and at `keepFrom`.
   *
   * @remarks
   * Each partition with expired records is rewritten without them (temp file, then rename); its
   * appends wait meanwhile. A partition that refuses appends (`partition-failed`) is skipped. Lost
   * offsets inside the removed prefix go with it; they are not counted as removed records.
   * @throws HarrierError `log-closed`; a file system error when a rewrite fails (the partition then
   * keeps its records).
   */
  async maintenance(nowMs: number, options: MaintenanceOptions = {}): Promise<number> {
    this.#assertOpen();
    let removed = 0;
    for (const spec of this.#topics.values()) {
      const retentionMs = spec.retentionMs;
      if (retentionMs === undefined) continue;
      for (const state of this.#partitions.get(spec.name) ?? []) {
        const expired = (index: number): boolean => {
          const at = state.appendedAt[index];
          return at !== undefined && at + retentionMs <= nowMs;
        };
        if (!expired(0)) continue;
        const keepFrom = await options.keepFrom?.(spec.name, state.partition);
        removed += await this.#serialize(state, async () => {
          if (state.failed !== undefined || this.#closed) return 0;
          let count = 0;
          while (expired(count) && (keepFrom === undefined || state.base + count < keepFrom)) count++;
          if (count === 0) return 0;
          const lost = lostBelow(state.lost, state.base + count);
          await this.#removePrefix(state, count);
          return count - lost;
        });
      }
    }
    return removed;
  }

  /**
   * Finishes the appends already accepted, ends every subscription, closes the files and releases
   * the directory's lock. Appends after `close` are refused (`log-closed`).
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    const states = [...this.#partitions.values()].flat();
    for (const state of states) state.waiters.wakeAll();
    for (const state of states) {
      // A batch may queue the next one while it runs: wait until the chain stops growing.
      for (let chain = state.chain; ; chain = state.chain) {
        await chain;
        if (chain === state.chain) break;
      }
    }
    await Promise.all(states.map((state) => retire(state.segment)));
    await releaseLock(this.#lockFile, this.#lockContent);
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'log-closed',
        `The file event log in ${this.directory} is closed: open it again with FileEventLog.open`,
      );
    }
  }

  #partition(topic: string, partition: number): PartitionState {
    const spec = topicOf(this.#topics, topic);
    checkPartition(spec, partition);
    const state = this.#partitions.get(topic)?.[partition];
    if (state === undefined) throw new Error(`missing partition state for ${topic}/${partition}`);
    return state;
  }

  /** Checks an append before it is queued. */
  #stateForAppend(topic: string, input: AppendInput): PartitionState {
    const spec = topicOf(this.#topics, topic);
    this.#assertOpen();
    checkSchema(spec, input.body);
    const state = this.#partition(topic, partitionFor(spec, input.key));
    if (state.failed !== undefined) throw state.failed;
    return state;
  }

  /** Runs `task` after every earlier batch and rewrite of the partition. */
  #serialize<T>(state: PartitionState, task: () => Promise<T>): Promise<T> {
    const result = state.chain.then(task);
    state.chain = result.catch(() => undefined);
    return result;
  }

  #enqueue(state: PartitionState, input: AppendInput, uid: string | undefined): Promise<AppendAck> {
    return new Promise<AppendAck>((resolvePending, rejectPending) => {
      state.queue.push({ input, uid, resolve: resolvePending, reject: rejectPending });
      this.#scheduleFlush(state);
    });
  }

  #scheduleFlush(state: PartitionState): void {
    if (state.flushScheduled) return;
    state.flushScheduled = true;
    void this.#serialize(state, () => this.#flush(state));
  }

  /**
   * Writes the queued appends as one batch: one write, one flush, then every ack. Never rejects (it
   * runs unawaited): whatever fails fails the batch's appends.
   */
  async #flush(state: PartitionState): Promise<void> {
    state.flushScheduled = false;
    const batch = state.queue.splice(0, MAX_APPEND_BATCH);
    if (state.queue.length > 0) this.#scheduleFlush(state);
    if (batch.length === 0) return;
    try {
      await this.#writeBatch(state, batch);
    } catch (error) {
      // Appends already acked stay acked: settling a promise twice changes nothing.
      for (const pending of batch) pending.reject(error);
    }
  }

  async #writeBatch(state: PartitionState, batch: readonly PendingAppend[]): Promise<void> {
    if (state.failed !== undefined) {
      for (const pending of batch) pending.reject(state.failed);
      return;
    }
    const first = state.base + state.positions.length;
    const appendedAt = this.#clock.now();
    const frames = batch.map((pending, index) => {
      const record: StoredRecord = {
        offset: first + index,
        id: pending.input.id,
        key: pending.input.key,
        type: pending.input.type,
        body: pending.input.body,
        ...(pending.uid === undefined ? {} : { uid: pending.uid }),
        appendedAt,
      };
      return encodeFrame(record);
    });
    const bytes = Buffer.concat(frames);
    try {
      await appendAt(state.segment.handle, state.size, bytes, this.#fsync);
    } catch (error) {
      const failure = this.#appendError(state, error);
      for (const pending of batch) pending.reject(failure);
      return;
    }
    let position = state.size;
    batch.forEach((pending, index) => {
      const offset = first + index;
      const { id } = pending.input;
      state.positions.push(position);
      state.appendedAt.push(appendedAt);
      state.ids.push(id);
      state.uids.push(pending.uid);
      position += frames[index]?.length ?? 0;
      if (!this.#byId.has(id)) {
        this.#byId.set(id, { topic: state.topic, partition: state.partition, offset });
      }
      const ack: AppendAck = Object.freeze({
        topic: state.topic,
        partition: state.partition,
        offset,
        id,
        uid: pending.uid,
        appendedAt,
        duplicate: false,
      });
      if (pending.uid !== undefined) this.#byUid.set(pending.uid, ack);
      pending.resolve(ack);
    });
    state.size = position;
    state.waiters.wakeAll();
  }

  #appendError(state: PartitionState, error: unknown): HarrierError {
    const where = `topic "${state.topic}" partition ${state.partition} (${state.file})`;
    if (error instanceof AppendFailure && error.restored) {
      return new HarrierError(
        'append-failed',
        `Appending to ${where} failed and was undone, nothing was appended: ${describeError(error.cause)}; fix the cause (disk full? permissions?) and retry`,
        { cause: error.cause },
      );
    }
    state.failed = new HarrierError(
      'partition-failed',
      `${where} refuses appends: an append failed (${describeError(error instanceof AppendFailure ? error.cause : error)}) and cutting it back failed too, so the file may end in a partial record; close the log and open it again with FileEventLog.open, which cuts the torn tail off`,
      { cause: error },
    );
    return state.failed;
  }

  /** Reads up to `max` records from `fromOffset` (raised to the oldest retained one). */
  async #readRange(
    state: PartitionState,
    fromOffset: number,
    max: number,
  ): Promise<{ readonly records: LogRecord[]; readonly next: number }> {
    // Everything about the segment is taken before the first await: a retention rewrite swaps the
    // segment and its positions together, and the old file stays readable until its readers finish.
    const segment = state.segment;
    const end = state.base + state.positions.length;
    const { start, stop } = spanOf(state.lost, Math.max(fromOffset, state.base), end, max);
    if (start >= stop) return { records: [], next: stop };
    const startPosition = state.positions[start - state.base] ?? 0;
    const stopPosition = stop === end ? state.size : (state.positions[stop - state.base] ?? state.size);
    segment.readers++;
    let stored: StoredRecord[];
    try {
      stored = await readFrames(segment.handle, startPosition, stopPosition);
    } catch (error) {
      throw new HarrierError(
        'log-corrupt',
        `Reading offsets ${start} to ${stop - 1} of topic "${state.topic}" partition ${state.partition} failed (${describeError(error)}): ${state.file} changed under the log; close and reopen it to recover`,
        { cause: error },
      );
    } finally {
      segment.readers--;
      if (segment.retired && segment.readers === 0) void closeQuietly(segment.handle);
    }
    const records = stored
      .filter((record) => record.lost === undefined)
      .map((record) =>
        Object.freeze({
          topic: state.topic,
          partition: state.partition,
          offset: record.offset,
          id: record.id,
          key: record.key,
          type: record.type,
          body: record.body,
          uid: record.uid,
          appendedAt: record.appendedAt,
        }),
      );
    return { records, next: stop };
  }

  async *#follow(
    state: PartitionState,
    from: number,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<LogRecord> {
    let next = from;
    const ended = (): boolean => this.#closed || signal?.aborted === true;
    while (!ended()) {
      if (next < state.base + state.positions.length) {
        let batch: { readonly records: LogRecord[]; readonly next: number };
        try {
          batch = await this.#readRange(state, next, SUBSCRIBE_BATCH);
        } catch (error) {
          if (ended()) return;
          throw error;
        }
        for (const record of batch.records) {
          if (ended()) return;
          // Retention may have removed the rest of the batch while this generator was suspended.
          if (record.offset < state.base) continue;
          next = record.offset + 1;
          yield record;
        }
        // Past lost offsets at the end of the batch (or the whole of it).
        next = Math.max(next, batch.next);
        continue;
      }
      await state.waiters.wait(signal);
    }
  }

  /** Rewrites a partition's segment without its first `count` records. */
  async #removePrefix(state: PartitionState, count: number): Promise<void> {
    const cut = count < state.positions.length ? (state.positions[count] ?? state.size) : state.size;
    const newBase = state.base + count;
    const lines: string[] = [];
    for (let index = 0; index < count; index++) {
      const uid = state.uids[index];
      const offset = state.base + index;
      if (uid === undefined || offset <= state.uidsThrough) continue;
      const line: UidLine = {
        offset,
        id: state.ids[index] ?? '',
        uid,
        appendedAt: state.appendedAt[index] ?? 0,
      };
      lines.push(`${JSON.stringify(line)}\n`);
    }
    // Order matters for a crash in between: the uids first (a repeat on reopen is harmless), then
    // the base (a base above the segment's first record is ignored), then the rename.
    if (lines.length > 0) {
      await appendLines(state.uidsFile, lines.join(''), this.#fsync);
      state.uidsThrough = newBase - 1;
    }
    const tmp = `${state.file}.tmp`;
    await writeParts(state.segment.handle, [[cut, state.size]], tmp, this.#fsync);
    await writeFileAtomic(state.baseFile, `${newBase}\n`, this.#fsync);
    await rename(tmp, state.file);
    let handle: FileHandle;
    try {
      if (this.#fsync) await syncDirectory(dirname(state.file));
      handle = await openReadWrite(state.file);
    } catch (error) {
      state.failed = new HarrierError(
        'partition-failed',
        `Topic "${state.topic}" partition ${state.partition} refuses appends: its segment was rewritten by retention but could not be opened again (${describeError(error)}); close the log and open it again with FileEventLog.open`,
        { cause: error },
      );
      throw state.failed;
    }
    const old = state.segment;
    state.segment = { handle, readers: 0, retired: false };
    void retire(old);
    for (let index = 0; index < count; index++) {
      const id = state.ids[index];
      if (id === undefined) continue;
      const location = this.#byId.get(id);
      if (
        location?.topic === state.topic &&
        location.partition === state.partition &&
        location.offset === state.base + index
      ) {
        this.#byId.delete(id);
      }
    }
    state.positions = state.positions.slice(count).map((position) => position - cut);
    state.lost = state.lost
      .filter((run) => run.to >= newBase)
      .map((run) => (run.from >= newBase ? run : { ...run, from: newBase }));
    state.appendedAt = state.appendedAt.slice(count);
    state.ids = state.ids.slice(count);
    state.uids = state.uids.slice(count);
    state.base = newBase;
    state.size -= cut;
  }
}

/** How many of `lost` are below `offset`. */
function lostBelow(lost: readonly FileEventLogLostOffsets[], offset: number): number {
  let count = 0;
  for (const run of lost) if (run.from < offset) count += Math.min(run.to + 1, offset) - run.from;
  return count;
}

/**
 * The offsets `[start, stop)` that a read of up to `max` records from `from` covers: lost offsets at
 * `from` are skipped, and lost offsets inside the span are not counted against `max`.
 */
function spanOf(
  lost: readonly FileEventLogLostOffsets[],
  from: number,
  end: number,
  max: number,
): { readonly start: number; readonly stop: number } {
  let index = lost.findIndex((run) => run.to >= from);
  if (index < 0) index = lost.length;
  let start = from;
  const first = lost[index];
  if (first !== undefined && first.from <= start) {
    start = first.to + 1;
    index++;
  }
  let stop = start;
  let count = 0;
  while (stop < end && count < max) {
    const run = lost[index];
    if (run?.from === stop) {
      stop = run.to + 1;
      index++;
      continue;
    }
    const limit = Math.min(end, run?.from ?? end, stop + max - count);
    count += limit - stop;
    stop = limit;
  }
  return { start, stop: Math.min(stop, Math.max(start, end)) };
}

async function appendLines(file: string, text: string, fsync: boolean): Promise<void> {
  const handle = await open(file, 'a', 0o644);
  try {
    await handle.appendFile(text, 'utf8');
    if (fsync) await handle.datasync();
  } finally {
    await handle.close();
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
