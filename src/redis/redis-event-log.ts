import type { Cluster, Redis } from 'ioredis';
import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
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
} from '../log/event-log.js';
import {
  checkPartition,
  checkSchema,
  indexTopics,
  partitionFor,
  topicInfo,
  topicOf,
  checkReadRange,
} from '../log/topics.js';
import {
  connectionFor,
  evalScript,
  keyPrefixOf,
  redisScript,
  runCommand,
  translateRedisError,
  type RedisConnection,
  type RedisErrorContext,
  type RedisScript,
} from './redis-support.js';
import { isClusterClient, type RedisClient, type RedisConnectionOptions } from './redis-connection.js';

/** Options of {@link RedisEventLog}. */
export interface RedisEventLogOptions {
  /**
   * Where Redis is (see {@link RedisConnectionOptions}): a `redis://` (or `rediss://`) URL, an
   * ioredis client to share (a `Redis`, or a `Cluster` for Redis Cluster), `{ cluster: nodes }`, or
   * ioredis options. Every key carries the prefix's hash tag, so on a cluster all share one slot.
   *
   * @remarks
   * The log creates, and on {@link RedisEventLog.close} quits, a client for a URL (or seed nodes, or options); a command on it
   * waits through one reconnect attempt (connect timeout 3 s) before it fails with
   * `redis-unavailable`, so an append to a Redis that is down fails fast and its caller retries. A
   * client passed in stays the caller's: the log never quits it and never adds listeners to it.
   * Either way each subscription opens a connection of its own (a `duplicate()` of the client that
   * waits through reconnects), and closes it when the subscription ends: a projection over a topic of
   * P partitions holds P connections while it runs.
   *
   * Records need Redis 6.2 or later (`XTRIM MINID`). They are as durable as the server's
   * persistence: run it with AOF (`appendonly yes`) for {@link LogCapabilities.durable} to hold.
   *
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * The topics manifest: every topic the log accepts, with its fixed partition count.
   *
   * @remarks
   * Only this process's manifest is checked; processes sharing a prefix must list the same topics
   * with the same partition counts, or their keys would hash to different partitions.
   *
   * @defaultValue none; required
   */
  readonly topics: readonly TopicSpec[];
  /**
   * Prefix of every key the log writes; its keys are `<prefix>:log:...`.
   *
   * @remarks
   * The braces make it a Redis Cluster hash tag, so every key of the log lands in one slot and the
   * Lua scripts that append and trim (which touch a stream, its counter and the indexes at once)
   * stay valid behind a cluster-aware proxy. Logs sharing a prefix share their records.
   *
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
  /**
   * Stamps `appendedAt` on each record, which retention compares against `maintenance(nowMs)`.
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
  /**
   * How long one blocking read of a live subscription waits for new records, in ms, before it
   * checks again whether the subscription was aborted or the log closed.
   *
   * @remarks
   * New records are pushed at once whatever this says (`XREAD BLOCK` returns as soon as one
   * arrives), and an abort or a close ends a waiting subscription at once too (its connection is
   * dropped); this only bounds how long a subscription whose abort was missed lingers.
   *
   * @defaultValue 1000
   */
  readonly pollIntervalMs?: number;
}

const DEFAULT_POLL_INTERVAL_MS = 1000;
/** Most records one `read` returns. */
const MAX_READ_BATCH = 10_000;
/** Records a subscription fetches per round trip, catching up and live. */
const SUBSCRIBE_BATCH = 1000;
/** Records `maintenance` inspects, and trims atomically, per round trip. */
const TRIM_CHUNK = 1000;

const CAPABILITIES: LogCapabilities = Object.freeze({
  durable: true,
  fsync: false,
  shared: true,
  livePush: true,
  maxReadBatch: MAX_READ_BATCH,
});

/**
 * Appends a batch of records, in order, each as the one append it stands for.
 *
 * KEYS: uid index, id index, then the stream and the counter of each partition the batch touches.
 * ARGV: the number of partitions G, their location prefixes (`topic|partition|`), then 8 fields per
 * record: partition number g (1..G), uid, id, key, type, body, appendedAt, ack JSON head (the ack
 * without its offset and closing brace; '' without a uid). The head, not the uid, tells an idempotent
 * append, because '' is a uid like any other. Returns 2 values per record: 0 and the offset it landed
 * at; 1 and the first ack's JSON for a known uid; 2 and Redis's error message when Redis refused a
 * write of that record.
 *
 * A counter holds its partition's length, so a record's offset is the length before it and its
 * stream id the length after it: stream ids must be above 0-0, and the counter never goes back, so
 * XADD with that id never meets an older one, also after trimming. Every counter is read before the
 * first write and stored at the end when it moved, once per partition and batch rather than once per record; every
 * write in between is a pcall, so nothing can stop the script between an XADD and the store of its
 * counter, which would leave the next append an id that is already taken. `string.format('%d')`
 * because Lua prints a number above 1e14 in exponent form.
 */
const APPEND_SCRIPT = `
local groups = tonumber(ARGV[1])
local start = {}
local next = {}
for g = 1, groups do
  local stored = redis.call('GET', KEYS[2 * g + 2])
  start[g] = tonumber(stored or '0')
  next[g] = start[g]
  if next[g] == nil then
    return redis.error_reply('ERR the offset counter ' .. KEYS[2 * g + 2] .. ' is not a whole number')
  end
end
local function refused(reply)
  return type(reply) == 'table' and reply.err
end
local out = {}
for i = groups + 2, #ARGV, 8 do
  local g = tonumber(ARGV[i])
  local uid = ARGV[i + 1]
  local idempotent = ARGV[i + 7] ~= ''
  local first = false
  if idempotent then first = redis.pcall('HGET', KEYS[1], uid) end
  if refused(first) then
    out[#out + 1] = 2
    out[#out + 1] = first.err
  elseif first then
    out[#out + 1] = 1
    out[#out + 1] = first
  else
    local n = next[g] + 1
    local offset = string.format('%d', n - 1)
    local added
    if idempotent then
      added = redis.pcall('XADD', KEYS[2 * g + 1], string.format('%d', n) .. '-0', 'id', ARGV[i + 2], 'key', ARGV[i + 3], 'type', ARGV[i + 4], 'body', ARGV[i + 5], 'uid', uid, 'at', ARGV[i + 6])
    else
      added = redis.pcall('XADD', KEYS[2 * g + 1], string.format('%d', n) .. '-0', 'id', ARGV[i + 2], 'key', ARGV[i + 3], 'type', ARGV[i + 4], 'body', ARGV[i + 5], 'at', ARGV[i + 6])
    end
    if refused(added) then
      out[#out + 1] = 2
      out[#out + 1] = added.err
    else
      next[g] = n
      local indexed = redis.pcall('HSETNX', KEYS[2], ARGV[i + 2], ARGV[g + 1] .. offset)
      if idempotent and not refused(indexed) then
        indexed = redis.pcall('HSET', KEYS[1], uid, ARGV[i + 7] .. offset .. '}')
      end
      if refused(indexed) then
        out[#out + 1] = 2
        out[#out + 1] = indexed.err
      else
        out[#out + 1] = 0
        out[#out + 1] = n - 1
      end
    end
  end
end
for g = 1, groups do
  if next[g] ~= start[g] then redis.call('SET', KEYS[2 * g + 2], string.format('%d', next[g])) end
end
return out
`;

/** Most records one append script takes: a batch blocks Redis for about 3 µs a record. */
const APPEND_BATCH = 256;

/**
 * Most body characters one append script takes (a lone larger record still goes alone): ioredis
 * joins a command's arguments into one string, which V8 caps at 2^29 - 24 characters, and Redis
 * holds the whole call in memory and is blocked while the script copies it.
 */
const APPEND_BATCH_CHARS = 8 * 1024 * 1024;

/**
 * KEYS: stream, id index. ARGV: MINID (stream id of the first record kept), location prefix, then
 * (event id, offset) pairs of the records trimmed. Removes each id's index entry only while it still
 * points at the trimmed record (the first record of an id wins the index). Returns how many records
 * the trim removed.
 */
const TRIM_SCRIPT = `
local removed = redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
for i = 3, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[2] .. ARGV[i + 1] then
    redis.call('HDEL', KEYS[2], ARGV[i])
  end
end
return removed
`;

const SCRIPTS = { append: redisScript(APPEND_SCRIPT), trim: redisScript(TRIM_SCRIPT) } as const;

/** An append waiting in the queue for the next {@link APPEND_SCRIPT} call. */
interface PendingAppend {
  readonly topic: string;
  readonly partition: number;
  readonly uid: string | undefined;
  readonly input: AppendInput;
  readonly appendedAt: number;
  readonly resolve: (ack: AppendAck) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * A write the append script reported Redis refused, shaped as ioredis reports a refused command, so
 * that `#run` turns it into `redis-command-failed` as it does for a whole call that fails.
 */
function refusal(message: string): Error {
  const error = new Error(message);
  error.name = 'ReplyError';
  return error;
}

/** A stream entry as XRANGE and XREAD return it. */
type StreamEntry = [id: string, fields: string[]];

/** The stream id of an offset: offsets are dense from 0, stream ids must be above 0-0. */
function streamIdOf(offset: number): string {
  return `${offset + 1}-0`;
}

function offsetOf(streamId: string): number {
  return Number(streamId.slice(0, streamId.indexOf('-'))) - 1;
}

function toRecord(topic: string, partition: number, entry: StreamEntry): LogRecord {
  const fields = entry[1];
  let id = '';
  let key = '';
  let type = '';
  let body = '';
  let uid: string | undefined;
  let at = '0';
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const value = fields[i + 1] as string;
    switch (fields[i]) {
      case 'id':
        id = value;
        break;
      case 'key':
        key = value;
        break;
      case 'type':
        type = value;
        break;
      case 'body':
        body = value;
        break;
      case 'uid':
        uid = value;
        break;
      case 'at':
        at = value;
        break;
      default:
        break;
    }
  }
  return { topic, partition, offset: offsetOf(entry[0]), id, key, type, body, uid, appendedAt: Number(at) };
}

/** The entries of one stream in an XREAD reply, in either reply mapping (RESP2 shape or RESP3 map). */
function entriesOf(reply: unknown): StreamEntry[] {
  if (reply === null || reply === undefined) return [];
  if (Array.isArray(reply)) {
    const first = reply[0] as [string, StreamEntry[]] | undefined;
    return first?.[1] ?? [];
  }
  const values = Object.values(reply as Record<string, StreamEntry[]>);
  return values[0] ?? [];
}

/**
 * An {@link EventLog} on Redis Streams, shared by every process that uses the same Redis and prefix.
 *
 * @remarks
 * Each (topic, partition) is a stream `<prefix>:log:<topic>:<partition>` whose entry for offset `n`
 * has the stream id `<n + 1>-0` (stream ids must be above `0-0`; they are not timestamps) and the
 * fields `id`, `key`, `type`, `body`, `uid` (idempotent appends only) and `at` (appendedAt). A counter
 * `<prefix>:log:<topic>:<partition>:next` holds the partition's length, so offsets are dense, start
 * at 0 and never go back, also when retention trims the stream.
 *
 * Appends run in a Lua script: for each record it checks the uid index `<prefix>:log:uids` (uid to
 * the first ack's JSON), takes the next offset, adds the entry and records the event id in
 * `<prefix>:log:ids` (event id to `topic|partition|offset`; the first record of an id wins). So
 * concurrent appenders on any number of processes never share an offset, never leave a gap and
 * never land one uid twice. The appends made in one tick (the records of a `Promise.all`, say) go
 * out together, in call order, up to 256 records and 8 Mi body characters to a script call: one
 * round trip and one script run for the lot instead of one each, which is what brings an append
 * close to a bare pipelined `XADD`. A read made in the same tick goes out after them.
 * Each append still settles on its own: a write Redis refuses fails that append alone.
 *
 * `maintenance` trims each partition of a topic with `retentionMs` from the front (`XTRIM MINID`)
 * up to the first record that is younger than the retention or protected by `keepFrom`, and drops
 * the trimmed records from the id index. Uid acks outlive retention, as in the in-memory log: a
 * retried or replayed `appendIdempotent` never lands twice however late it comes, at the cost of
 * one hash entry (the ack's JSON, about 150 bytes) per idempotent append for the life of the prefix.
 *
 * Subscriptions read on a connection of their own, blocking on `XREAD` once caught up, so each
 * record is pushed as it is appended; they wait out a Redis restart instead of failing. Other calls
 * reject with a {@link HarrierError}: `redis-unavailable` when Redis cannot be reached,
 * `redis-command-failed` when it refuses a command, `log-closed` after {@link close}.
 *
 * @example
 * ```ts
 * const log = new RedisEventLog({
 *   connection: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
 *   topics: [{ name: 'orders', partitions: 8, retentionMs: 7 * 24 * 3600_000 }],
 * });
 * const ack = await log.append('orders', { id, key: 'order-1', type: 'orders.OrderPlaced', body });
 * const records = await log.read('orders', ack.partition, 0, 1000);
 * await log.close();
 * ```
 */
export class RedisEventLog implements EventLog {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #errors: RedisErrorContext;
  readonly #topics: Map<string, TopicSpec>;
  readonly #clock: Clock;
  readonly #pollIntervalMs: number;
  readonly #keyspace: string;
  readonly #uidsKey: string;
  readonly #idsKey: string;
  /** The blocking connections of live subscriptions, dropped by {@link close}. */
  readonly #blocking = new Set<Redis | Cluster>();
  /** Appends made since the last flush, in call order. */
  #queue: PendingAppend[] = [];
  /** Script calls sent and not yet settled, which {@link close} waits for before it quits. */
  readonly #inFlight = new Set<Promise<void>>();
  #closed = false;

  /**
   * @throws HarrierError `invalid-topic` when the manifest breaks a naming or partition rule,
   * `invalid-option` for an empty prefix or a poll interval that is not a positive whole number.
   */
  constructor(options: RedisEventLogOptions) {
    this.#topics = indexTopics(options.topics);
    const prefix = keyPrefixOf(options.prefix, 'RedisEventLog');
    const pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    if (!Number.isInteger(pollIntervalMs) || pollIntervalMs < 1) {
      throw new HarrierError(
        'invalid-option',
        `RedisEventLog pollIntervalMs must be a positive whole number of ms, got ${pollIntervalMs}: pass a value such as 1000, or leave it out for the default`,
      );
    }
    this.#pollIntervalMs = pollIntervalMs;
    this.#clock = options.clock ?? systemClock;
    this.#keyspace = logKeyspace(prefix);
    this.#uidsKey = `${this.#keyspace}uids`;
    this.#idsKey = `${this.#keyspace}ids`;

    this.#connection = connectionFor(options.connection);
    this.#client = this.#connection.client;
    this.#errors = {
      connection: this.#connection,
      command: 'an event log command',
      keyspace: this.#keyspace,
      check: 'that it is Redis 6.2 or later',
    };
  }

  /** @throws UnknownTopicError, HarrierError `validation-failed`, `redis-unavailable` or `log-closed`. */
  append(topic: string, record: AppendInput): Promise<AppendAck> {
    return this.#run(() => this.#append(topic, undefined, record));
  }

  /** @throws UnknownTopicError, HarrierError `validation-failed`, `redis-unavailable` or `log-closed`. */
  appendIdempotent(topic: string, uid: string, record: AppendInput): Promise<AppendAck> {
    return this.#run(() => this.#append(topic, uid, record));
  }

  /** @remarks Returns the first ack as it was issued (`duplicate: false`), also after retention. */
  findByUid(uid: string): Promise<AppendAck | undefined> {
    return this.#runAfterAppends(async () => {
      const json = await this.#client.hget(this.#uidsKey, uid);
      return json === null ? undefined : this.#decodeAck(json, false);
    });
  }

  /**
   * @remarks Offsets below the oldest retained record are gone; reading from one starts at the
   * oldest retained record. At most {@link LogCapabilities.maxReadBatch} records come back.
   * @throws UnknownTopicError, HarrierError `invalid-partition` or `invalid-argument`.
   */
  read(topic: string, partition: number, fromOffset: number, max: number): Promise<LogRecord[]> {
    return this.#runAfterAppends(async () => {
      const key = this.#streamKey(topic, partition);
      checkReadRange(fromOffset, max, MAX_READ_BATCH);
      const entries = (await this.#client.xrange(
        key,
        streamIdOf(fromOffset),
        '+',
        'COUNT',
        Math.min(max, MAX_READ_BATCH),
      )) as StreamEntry[];
      const records = new Array<LogRecord>(entries.length);
      for (let i = 0; i < entries.length; i++) {
        records[i] = toRecord(topic, partition, entries[i] as StreamEntry);
      }
      return records;
    });
  }

  /**
   * @remarks Opens a connection of its own (named `<stream key>:subscriber` in `CLIENT LIST`),
   * catches up with `XRANGE` in batches of 1000, then waits for new records with `XREAD BLOCK`.
   * Rides out a Redis restart: the connection reconnects for as long as it takes and the pending
   * read is sent again, so a subscription never fails for want of Redis, it waits. Ends when
   * `signal` aborts, when the loop breaks, or when the log closes; rejects only when Redis refuses
   * a read (`redis-command-failed`, e.g. a key of another type).
   * @throws UnknownTopicError, HarrierError `invalid-partition` or `invalid-argument` (when called,
   * not on iteration).
   */
  subscribe(topic: string, options: SubscribeOptions): AsyncIterable<LogRecord> {
    const key = this.#streamKey(topic, options.partition);
    const afterOffset = options.afterOffset ?? -1;
    if (!Number.isInteger(afterOffset) || afterOffset < -1) {
      throw new HarrierError(
        'invalid-argument',
        `subscribe afterOffset must be a whole number from -1 (from the start), got ${afterOffset}`,
      );
    }
    return this.#follow(topic, options.partition, key, afterOffset + 1, options.signal);
  }

  getEvent(id: string): Promise<LogRecord | undefined> {
    return this.#runAfterAppends(async () => {
      const location = await this.#client.hget(this.#idsKey, id);
      if (location === null) return undefined;
      // The topic may hold '|', partitions and offsets never do.
      const offsetAt = location.lastIndexOf('|');
      const partitionAt = location.lastIndexOf('|', offsetAt - 1);
      const topic = location.slice(0, partitionAt);
      const partition = Number(location.slice(partitionAt + 1, offsetAt));
      const streamId = streamIdOf(Number(location.slice(offsetAt + 1)));
      const entries = (await this.#client.xrange(
        this.#keyOf(topic, partition),
        streamId,
        streamId,
      )) as StreamEntry[];
      const entry = entries[0];
      return entry === undefined ? undefined : toRecord(topic, partition, entry);
    });
  }

  topics(): Promise<TopicInfo[]> {
    return Promise.resolve([...this.#topics.values()].map(topicInfo));
  }

  /** @throws UnknownTopicError */
  partitions(topic: string): Promise<number> {
    return this.#run(() => Promise.resolve(topicOf(this.#topics, topic).partitions));
  }

  /** @throws UnknownTopicError, HarrierError `invalid-partition`. */
  endOffset(topic: string, partition: number): Promise<number> {
    return this.#runAfterAppends(async () => {
      const key = this.#streamKey(topic, partition);
      const next = await this.#client.get(`${key}:next`);
      return next === null ? 0 : Number(next);
    });
  }

  capabilities(): LogCapabilities {
    return CAPABILITIES;
  }

  /**
   * Removes, from the front of each partition of a topic with `retentionMs`, every record with
   * `appendedAt + retentionMs <= nowMs`, stopping at the first younger one and at `keepFrom`.
   *
   * @remarks
   * Looks at each partition's oldest record, and when it has expired walks on in chunks of 1000,
   * trimming each chunk atomically, so it never blocks Redis for long and a concurrent maintenance
   * on another process removes each record once. `keepFrom` is asked only for partitions whose oldest record has expired. The
   * partition counters are untouched: offsets never go back.
   */
  maintenance(nowMs: number, options: MaintenanceOptions = {}): Promise<number> {
    return this.#runAfterAppends(async () => {
      let removed = 0;
      for (const spec of this.#topics.values()) {
        const retentionMs = spec.retentionMs;
        if (retentionMs === undefined) continue;
        for (let partition = 0; partition < spec.partitions; partition++) {
          removed += await this.#expire(spec.name, partition, nowMs - retentionMs, options);
        }
      }
      return removed;
    });
  }

  /**
   * Ends every subscription and quits the client the log created from a URL; a client passed in is
   * left open. Records stay in Redis. Later calls reject with `log-closed`; closing twice is harmless.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Appends made before close still go out and settle before the QUIT: a batch that meets NOSCRIPT
    // sends its EVAL only after the reply, which would come after a QUIT sent at once.
    this.#flush();
    // A client passed in stays open, so its batches settle without waiting here; one that is not
    // ready would keep its commands queued until they fail, so it is dropped at once as before.
    if (this.#connection.owned && this.#client.status === 'ready') await Promise.all(this.#inFlight);
    for (const blocking of this.#blocking) blocking.disconnect();
    this.#blocking.clear();
    await this.#connection.close();
  }

  /**
   * Checks a record and queues it for the next batch; called in the synchronous part of `#run`, so
   * every append made in one tick shares one script call.
   */
  #append(topic: string, uid: string | undefined, input: AppendInput): Promise<AppendAck> {
    const spec = topicOf(this.#topics, topic);
    try {
      checkSchema(spec, input.body);
    } catch (error) {
      return this.#firstAckOr(uid, error);
    }
    const partition = partitionFor(spec, input.key);
    const appendedAt = this.#clock.now();
    return new Promise<AppendAck>((resolve, reject) => {
      // A microtask rather than a timer: a lone append waits for nothing, and the appends of one
      // `Promise.all` are all queued before it runs.
      if (this.#queue.length === 0) queueMicrotask(this.#flush);
      this.#queue.push({ topic, partition, uid, input, appendedAt, resolve, reject });
    });
  }

  /** The first ack of a uid appended before, whatever a retry carries; else `error`. */
  async #firstAckOr(uid: string | undefined, error: unknown): Promise<AppendAck> {
    if (uid === undefined) throw error;
    // The queued appends go out ahead of the lookup, so a first append made earlier in this tick is
    // found, as it would be were each append its own command.
    this.#flush();
    const first = await this.#client.hget(this.#uidsKey, uid);
    if (first === null) throw error;
    return this.#decodeAck(first, true);
  }

  /**
   * Sends the queued appends, in order, in script calls of at most {@link APPEND_BATCH} records and
   * {@link APPEND_BATCH_CHARS} body characters.
   */
  readonly #flush = (): void => {
    const queue = this.#queue;
    if (queue.length === 0) return;
    this.#queue = [];
    let from = 0;
    let chars = 0;
    for (let i = 0; i < queue.length; i++) {
      const size = (queue[i] as PendingAppend).input.body.length;
      if (i > from && (i - from === APPEND_BATCH || chars + size > APPEND_BATCH_CHARS)) {
        this.#send(queue.slice(from, i));
        from = i;
        chars = 0;
      }
      chars += size;
    }
    this.#send(queue.slice(from));
  };

  /** Runs one batch, kept in {@link #inFlight} until it settles. */
  #send(batch: readonly PendingAppend[]): void {
    // #appendBatch settles each append itself; should it still throw, the appends fail with it
    // rather than the process with an unhandled rejection.
    const sent = this.#appendBatch(batch).catch((error: unknown) => {
      for (const pending of batch) pending.reject(error);
    });
    this.#inFlight.add(sent);
    void sent.finally(() => this.#inFlight.delete(sent));
  }

  /** Runs {@link APPEND_SCRIPT} on a batch and settles each append with its own outcome; never rejects. */
  async #appendBatch(batch: readonly PendingAppend[]): Promise<void> {
    const keys = [this.#uidsKey, this.#idsKey];
    const groups = new Map<string, number>();
    const locations: string[] = [];
    const fields: string[] = [];
    for (const { topic, partition, uid, input, appendedAt } of batch) {
      const stream = this.#keyOf(topic, partition);
      let group = groups.get(stream);
      if (group === undefined) {
        group = groups.size + 1;
        groups.set(stream, group);
        keys.push(stream, `${stream}:next`);
        locations.push(`${topic}|${partition}|`);
      }
      // The script completes the ack's JSON with the offset it takes; only idempotent appends keep one.
      const head =
        uid === undefined
          ? ''
          : `${JSON.stringify({ topic, partition, id: input.id, uid, appendedAt }).slice(0, -1)},"offset":`;
      fields.push(
        String(group),
        uid ?? '',
        input.id,
        input.key,
        input.type,
        input.body,
        String(appendedAt),
        head,
      );
    }
    let reply: unknown[];
    try {
      reply = (await this.#eval(SCRIPTS.append, keys, [
        String(groups.size),
        ...locations,
        ...fields,
      ])) as unknown[];
    } catch (error) {
      for (const pending of batch) pending.reject(error);
      return;
    }
    for (let i = 0; i < batch.length; i++) {
      const { topic, partition, uid, input, appendedAt, resolve, reject } = batch[i] as PendingAppend;
      const value = reply[2 * i + 1];
      switch (reply[2 * i]) {
        case 0:
          resolve({
            topic,
            partition,
            offset: Number(value),
            id: input.id,
            uid,
            appendedAt,
            duplicate: false,
          });
          break;
        case 1:
          try {
            resolve(this.#decodeAck(String(value), true));
          } catch (error) {
            reject(error);
          }
          break;
        default:
          reject(refusal(String(value)));
      }
    }
  }

  #decodeAck(json: string, duplicate: boolean): AppendAck {
    let parsed: Omit<AppendAck, 'duplicate'>;
    try {
      parsed = JSON.parse(json) as Omit<AppendAck, 'duplicate'>;
    } catch (error) {
      throw new HarrierError(
        'log-corrupt',
        `An ack in "${this.#uidsKey}" is not valid JSON: something other than Harrier wrote to this key prefix; give the log a prefix of its own`,
        { cause: error },
      );
    }
    return {
      topic: parsed.topic,
      partition: parsed.partition,
      offset: parsed.offset,
      id: parsed.id,
      uid: parsed.uid,
      appendedAt: parsed.appendedAt,
      duplicate,
    };
  }

  /** Trims one partition's expired front; returns how many records went. */
  async #expire(
    topic: string,
    partition: number,
    expiredUpTo: number,
    options: MaintenanceOptions,
  ): Promise<number> {
    const key = this.#keyOf(topic, partition);
    let keepFrom: number | undefined;
    let asked = false;
    let removed = 0;
    // The oldest record alone first: most partitions have nothing expired, and their chunk of bodies
    // would cross the network for nothing.
    let count = 1;
    for (;;) {
      const entries = (await this.#client.xrange(key, '-', '+', 'COUNT', count)) as StreamEntry[];
      const doomed: LogRecord[] = [];
      let done = entries.length < count;
      for (const entry of entries) {
        const record = toRecord(topic, partition, entry);
        if (record.appendedAt > expiredUpTo) {
          done = true;
          break;
        }
        if (!asked) {
          keepFrom = await options.keepFrom?.(topic, partition);
          asked = true;
        }
        if (keepFrom !== undefined && record.offset >= keepFrom) {
          done = true;
          break;
        }
        doomed.push(record);
      }
      const last = doomed.at(-1);
      if (last !== undefined) {
        const reply = await this.#eval(
          SCRIPTS.trim,
          [key, this.#idsKey],
          [
            streamIdOf(last.offset + 1),
            `${topic}|${partition}|`,
            ...doomed.flatMap((record) => [record.id, String(record.offset)]),
          ],
        );
        removed += Number(reply);
      }
      if (done) return removed;
      count = TRIM_CHUNK;
    }
  }

  async *#follow(
    topic: string,
    partition: number,
    key: string,
    from: number,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<LogRecord> {
    const stopped = (): boolean => this.#closed || signal?.aborted === true;
    if (stopped()) return;
    // Commands on this connection wait through reconnects instead of failing, so a subscription
    // rides out a Redis restart: ioredis sends a pending read again once it is back.
    const subscriber = {
      // Redis takes only printable ASCII without spaces in a client name; topics may hold more.
      connectionName: `${key}:subscriber`.replace(/[^\x21-\x7e]/g, '?'),
      maxRetriesPerRequest: null,
      enableOfflineQueue: true,
    };
    const connection = isClusterClient(this.#client)
      ? this.#client.duplicate(undefined, {
          enableOfflineQueue: true,
          redisOptions: { ...this.#client.options.redisOptions, ...subscriber },
        } as Parameters<Cluster['duplicate']>[1])
      : this.#client.duplicate(subscriber);
    connection.on('error', () => {
      // Reconnects are retried without end; only an abort or a close ends the subscription.
    });
    this.#blocking.add(connection);
    // Dropping the connection rejects a pending read at once, so an abort needs no poll to notice.
    const drop = (): void => {
      connection.disconnect();
    };
    signal?.addEventListener('abort', drop, { once: true });
    /** Runs one read; undefined when the subscription was stopped meanwhile. */
    const attempt = async <T>(read: () => Promise<T>): Promise<T | undefined> => {
      try {
        return await read();
      } catch (error) {
        if (stopped()) return undefined;
        throw translateRedisError(error, this.#errors);
      }
    };
    let next = from;
    try {
      for (;;) {
        if (stopped()) return;
        const entries = await attempt(
          () =>
            connection.xrange(key, streamIdOf(next), '+', 'COUNT', SUBSCRIBE_BATCH) as Promise<StreamEntry[]>,
        );
        if (entries === undefined) return;
        for (const entry of entries) {
          if (stopped()) return;
          const record = toRecord(topic, partition, entry);
          next = record.offset + 1;
          yield record;
        }
        if (entries.length < SUBSCRIBE_BATCH) break;
      }
      for (;;) {
        if (stopped()) return;
        // XREAD returns entries above the id given: the stream id of offset next - 1 is `<next>-0`.
        const reply = await attempt(() =>
          connection.xread(
            'COUNT',
            SUBSCRIBE_BATCH,
            'BLOCK',
            this.#pollIntervalMs,
            'STREAMS',
            key,
            `${next}-0`,
          ),
        );
        if (stopped()) return;
        for (const entry of entriesOf(reply)) {
          if (stopped()) return;
          const record = toRecord(topic, partition, entry);
          next = record.offset + 1;
          yield record;
        }
      }
    } finally {
      signal?.removeEventListener('abort', drop);
      this.#blocking.delete(connection);
      connection.disconnect();
    }
  }

  /** The stream key of a provisioned topic's partition. @throws UnknownTopicError, HarrierError `invalid-partition`. */
  #streamKey(topic: string, partition: number): string {
    checkPartition(topicOf(this.#topics, topic), partition);
    return this.#keyOf(topic, partition);
  }

  #keyOf(topic: string, partition: number): string {
    return `${this.#keyspace}${topic}:${partition}`;
  }

  #eval(script: RedisScript, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    return evalScript(this.#client, script, keys, args);
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'log-closed',
        'The Redis event log is closed: create a new RedisEventLog to use the log again',
      );
    }
  }

  /**
   * Runs a read after the queued appends went out, so that it sees the appends made before it, as
   * it would were each append its own command on the connection.
   */
  #runAfterAppends<T>(body: () => Promise<T>): Promise<T> {
    this.#flush();
    return this.#run(body);
  }

  /** Runs `body` on an open log and turns Redis's failures into {@link HarrierError}s. */
  async #run<T>(body: () => Promise<T>): Promise<T> {
    this.#checkOpen();
    return runCommand(body, this.#errors);
  }
}

/** The start of every key of the log under `prefix`: streams are `<keyspace><topic>:<partition>`. */
function logKeyspace(prefix: string): string {
  return `${prefix}:log:`;
}

/**
 * Every (topic, partition) the log under `prefix` has appended to, found by SCAN over the
 * partitions' `:next` counters, partitions in ascending order. A partition that never had an append
 * does not show. On a cluster every primary is scanned (the prefix's hash tag puts all on one).
 */
export async function scanLogPartitions(client: RedisClient, prefix: string): Promise<Map<string, number[]>> {
  const head = logKeyspace(prefix);
  const pattern = `${head.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*:next`;
  const topics = new Map<string, number[]>();
  const servers = isClusterClient(client) ? client.nodes('master') : [client];
  for (const server of servers) {
    let cursor = '0';
    do {
      const [next, keys] = await server.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
      cursor = next;
      for (const key of keys) {
        const middle = key.slice(head.length, -':next'.length);
        const at = middle.lastIndexOf(':');
        const partition = middle.slice(at + 1);
        if (at <= 0 || !/^\d+$/.test(partition)) continue;
        const topic = middle.slice(0, at);
        const list = topics.get(topic) ?? [];
        list.push(Number(partition));
        topics.set(topic, list);
      }
    } while (cursor !== '0');
  }
  for (const list of topics.values()) list.sort((a, b) => a - b);
  return topics;
}
