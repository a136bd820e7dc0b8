import { systemClock, type Clock } from '../clock/clock.js';
import { WakeList } from '../clock/wake-list.js';
import { HarrierError } from '../errors/harrier-error.js';
import { settle } from '../errors/settle.js';
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
import {
  checkReadRange,
  checkPartition,
  checkSchema,
  indexTopics,
  partitionFor,
  topicInfo,
  topicOf,
} from './topics.js';

/** Options of {@link InMemoryEventLog}. */
export interface InMemoryEventLogOptions {
  /**
   * The topics manifest: every topic the log accepts, with its fixed partition count.
   * @defaultValue none; required
   */
  readonly topics: readonly TopicSpec[];
  /**
   * Stamps `appendedAt` on each record, which retention compares against `maintenance(nowMs)`.
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
}

/** Most records one `read` returns. */
const MAX_READ_BATCH = 10_000;

const CAPABILITIES: LogCapabilities = Object.freeze({
  durable: false,
  fsync: false,
  shared: false,
  livePush: true,
  maxReadBatch: MAX_READ_BATCH,
});

/** One partition: the retained records and the offset of the first one. */
interface PartitionState {
  /** Offset of `records[0]`; rises as retention removes records from the front. */
  base: number;
  records: LogRecord[];
  /** Subscribers waiting for the next append. */
  waiters: WakeList;
}

/**
 * An {@link EventLog} held in process memory, for tests and single-process applications.
 *
 * @remarks
 * Records are lost when the process ends (`durable: false`). Retention removes records from the
 * front of a partition, but offsets never go back: the next append continues the sequence. The acks
 * of `appendIdempotent` are kept for the life of the log, also after retention removed their
 * records, so a retried append can never land twice.
 *
 * @example
 * ```ts
 * const log = new InMemoryEventLog({ topics: [{ name: 'orders', partitions: 8 }] });
 * const ack = await log.append('orders', { id, key: 'order-1', type: 'orders.OrderPlaced', body });
 * ```
 */
export class InMemoryEventLog implements EventLog {
  readonly #topics: Map<string, TopicSpec>;
  readonly #clock: Clock;
  readonly #partitions = new Map<string, PartitionState[]>();
  readonly #byUid = new Map<string, AppendAck>();
  readonly #byId = new Map<string, LogRecord>();
  #closed = false;

  /** @throws HarrierError `invalid-topic` when the manifest breaks a naming or partition rule. */
  constructor(options: InMemoryEventLogOptions) {
    this.#topics = indexTopics(options.topics);
    this.#clock = options.clock ?? systemClock;
    for (const spec of this.#topics.values()) {
      this.#partitions.set(
        spec.name,
        Array.from({ length: spec.partitions }, () => ({ base: 0, records: [], waiters: new WakeList() })),
      );
    }
  }

  /** @throws UnknownTopicError, HarrierError `validation-failed` or `log-closed`. */
  append(topic: string, record: AppendInput): Promise<AppendAck> {
    return settle(() => this.#append(topic, undefined, record));
  }

  /** @throws UnknownTopicError, HarrierError `validation-failed` or `log-closed`. */
  appendIdempotent(topic: string, uid: string, record: AppendInput): Promise<AppendAck> {
    return settle(() => {
      topicOf(this.#topics, topic);
      const first = this.#byUid.get(uid);
      if (first !== undefined) return { ...first, duplicate: true };
      const ack = this.#append(topic, uid, record);
      this.#byUid.set(uid, ack);
      return ack;
    });
  }

  /** @remarks Returns the first ack as it was issued (`duplicate: false`). */
  findByUid(uid: string): Promise<AppendAck | undefined> {
    return Promise.resolve(this.#byUid.get(uid));
  }

  /**
   * @remarks Offsets below the oldest retained record are gone; reading from one starts at the
   * oldest retained record.
   * @throws UnknownTopicError, HarrierError `invalid-partition` or `invalid-argument`.
   */
  read(topic: string, partition: number, fromOffset: number, max: number): Promise<LogRecord[]> {
    return settle(() => {
      const state = this.#partition(topic, partition);
      checkReadRange(fromOffset, max, MAX_READ_BATCH);
      const start = Math.max(fromOffset, state.base) - state.base;
      return state.records.slice(start, start + Math.min(max, MAX_READ_BATCH));
    });
  }

  /** @throws UnknownTopicError, HarrierError `invalid-partition` (when called, not on iteration). */
  subscribe(topic: string, options: SubscribeOptions): AsyncIterable<LogRecord> {
    const state = this.#partition(topic, options.partition);
    return this.#follow(state, (options.afterOffset ?? -1) + 1, options.signal);
  }

  getEvent(id: string): Promise<LogRecord | undefined> {
    return Promise.resolve(this.#byId.get(id));
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
      return state.base + state.records.length;
    });
  }

  capabilities(): LogCapabilities {
    return CAPABILITIES;
  }

  /**
   * Removes, from the front of each partition of a topic with `retentionMs`, every record with
   * `appendedAt + retentionMs <= nowMs`, stopping at the first younger one and at `keepFrom`.
   */
  async maintenance(nowMs: number, options: MaintenanceOptions = {}): Promise<number> {
    let removed = 0;
    for (const spec of this.#topics.values()) {
      const retentionMs = spec.retentionMs;
      if (retentionMs === undefined) continue;
      const states = this.#partitions.get(spec.name) ?? [];
      for (const [partition, state] of states.entries()) {
        const expired = (record: LogRecord | undefined): record is LogRecord =>
          record !== undefined && record.appendedAt + retentionMs <= nowMs;
        if (!expired(state.records[0])) continue;
        const keepFrom = await options.keepFrom?.(spec.name, partition);
        let count = 0;
        for (;;) {
          const record = state.records[count];
          if (!expired(record) || (keepFrom !== undefined && record.offset >= keepFrom)) break;
          if (this.#byId.get(record.id) === record) this.#byId.delete(record.id);
          count++;
        }
        state.records.splice(0, count);
        state.base += count;
        removed += count;
      }
    }
    return removed;
  }

  /** Ends every subscription and refuses further appends. */
  close(): Promise<void> {
    this.#closed = true;
    for (const states of this.#partitions.values()) {
      for (const state of states) state.waiters.wakeAll();
    }
    return Promise.resolve();
  }

  #partition(topic: string, partition: number): PartitionState {
    const spec = topicOf(this.#topics, topic);
    checkPartition(spec, partition);
    const state = this.#partitions.get(topic)?.[partition];
    if (state === undefined) throw new Error(`missing partition state for ${topic}/${partition}`);
    return state;
  }

  #append(topic: string, uid: string | undefined, input: AppendInput): AppendAck {
    const spec = topicOf(this.#topics, topic);
    if (this.#closed) {
      throw new HarrierError(
        'log-closed',
        `The in-memory event log is closed: create a new one to append to topic "${topic}" again`,
      );
    }
    checkSchema(spec, input.body);
    const partition = partitionFor(spec, input.key);
    const state = this.#partition(topic, partition);
    const record: LogRecord = Object.freeze({
      topic,
      partition,
      offset: state.base + state.records.length,
      id: input.id,
      key: input.key,
      type: input.type,
      body: input.body,
      uid,
      appendedAt: this.#clock.now(),
    });
    state.records.push(record);
    if (!this.#byId.has(record.id)) this.#byId.set(record.id, record);
    state.waiters.wakeAll();
    return Object.freeze({
      topic,
      partition,
      offset: record.offset,
      id: record.id,
      uid,
      appendedAt: record.appendedAt,
      duplicate: false,
    });
  }

  async *#follow(
    state: PartitionState,
    from: number,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<LogRecord> {
    let next = from;
    while (!this.#closed && signal?.aborted !== true) {
      next = Math.max(next, state.base);
      const record = state.records[next - state.base];
      if (record !== undefined) {
        next++;
        yield record;
        continue;
      }
      await state.waiters.wait(signal);
    }
  }
}
