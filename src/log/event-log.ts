import type { z } from 'zod';

/** A topic as provisioned in a log's manifest. */
export interface TopicSpec {
  /** Topic name: 1 to 256 UTF-8 bytes, no wildcards (`*`, `?`, `[`, `]`, `>`) and no whitespace. */
  readonly name: string;
  /** Fixed partition count, 1 to 1024. */
  readonly partitions: number;
  /**
   * How long records stay in the hot log, in ms; `maintenance` removes older ones that every
   * checkpoint has passed.
   * @defaultValue unlimited
   */
  readonly retentionMs?: number;
  /**
   * Schema each record's envelope payload must match on append.
   * @defaultValue none
   */
  readonly schema?: z.ZodType;
}

/** A record to append. */
export interface AppendInput {
  /** The event id (envelope id). */
  readonly id: string;
  /** The partition key: the partition is `FNV-1a-64(utf8(key)) mod partitions`. */
  readonly key: string;
  /** The message type. */
  readonly type: string;
  /** The encoded envelope, stored untouched. */
  readonly body: string;
}

/** What an append returns: where the record landed. */
export interface AppendAck {
  readonly topic: string;
  readonly partition: number;
  /** Dense per-partition offset from 0. */
  readonly offset: number;
  readonly id: string;
  /** The idempotency uid, for `appendIdempotent`. */
  readonly uid: string | undefined;
  /** When the record was first appended, ms since the epoch. */
  readonly appendedAt: number;
  /** True when this uid was appended before and this is the first ack again. */
  readonly duplicate: boolean;
}

/** A stored record. */
export interface LogRecord {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly id: string;
  readonly key: string;
  readonly type: string;
  readonly body: string;
  readonly uid: string | undefined;
  readonly appendedAt: number;
}

/** A topic's shape as the log reports it. */
export interface TopicInfo {
  readonly name: string;
  readonly partitions: number;
  readonly retentionMs: number | undefined;
}

/** What a log implementation can do. */
export interface LogCapabilities {
  /** Records survive a restart of the process. */
  readonly durable: boolean;
  /** Records survive a restart of the machine (fsync on append). */
  readonly fsync: boolean;
  /** Other processes see appends (shared log). */
  readonly shared: boolean;
  /** `subscribe` is pushed, not polled. */
  readonly livePush: boolean;
  /** Most records `read` returns at once. */
  readonly maxReadBatch: number;
}

/** Options of {@link EventLog.subscribe}. */
export interface SubscribeOptions {
  readonly partition: number;
  /**
   * Yield only records with offsets above this one; -1 means from the start.
   * @defaultValue -1
   */
  readonly afterOffset?: number;
  /** Ends the iteration when aborted. */
  readonly signal?: AbortSignal;
}

/** Options of {@link EventLog.maintenance}. */
export interface MaintenanceOptions {
  /**
   * The lowest offset that must be kept in a partition (the lowest checkpoint + 1): nothing at or
   * above it is removed, however old. Undefined means no checkpoint protects the partition.
   * @defaultValue nothing protected
   */
  readonly keepFrom?: (topic: string, partition: number) => Promise<number | undefined>;
}

/**
 * A partitioned, append-only event log: the contract every log implements and the conformance suite
 * checks.
 *
 * @remarks
 * Offsets are dense per partition, start at 0 and never go back, across restarts and retention.
 * Unknown topics are an `UnknownTopicError`; topics are never created on append.
 */
export interface EventLog {
  /** Appends one record. @throws UnknownTopicError, HarrierError `validation-failed`. */
  append(topic: string, record: AppendInput): Promise<AppendAck>;
  /** Appends one record unless `uid` was appended before; then returns the first ack (duplicate: true). */
  appendIdempotent(topic: string, uid: string, record: AppendInput): Promise<AppendAck>;
  /** The ack of a uid appended before, for crash recovery. */
  findByUid(uid: string): Promise<AppendAck | undefined>;
  /** Up to `max` records from `fromOffset` on, in offset order (fewer at the end, none past it). */
  read(topic: string, partition: number, fromOffset: number, max: number): Promise<LogRecord[]>;
  /** Records after `afterOffset`, in order, then live ones as they are appended, until aborted. */
  subscribe(topic: string, options: SubscribeOptions): AsyncIterable<LogRecord>;
  /** A record by event id. */
  getEvent(id: string): Promise<LogRecord | undefined>;
  topics(): Promise<TopicInfo[]>;
  /** @throws UnknownTopicError */
  partitions(topic: string): Promise<number>;
  /** The next offset to be written in a partition (its length, retention included). */
  endOffset(topic: string, partition: number): Promise<number>;
  capabilities(): LogCapabilities;
  /** Removes records past hot retention that `keepFrom` allows; returns how many. */
  maintenance(nowMs: number, options?: MaintenanceOptions): Promise<number>;
  close(): Promise<void>;
}
