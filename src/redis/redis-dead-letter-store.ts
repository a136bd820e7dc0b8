import type { Cluster, Redis } from 'ioredis';
import { decodeGroupCursor, groupPageLimit } from '../dead-letters/dead-letter-groups.js';
import type {
  DeadLetterFilter,
  DeadLetterGroupPage,
  DeadLetterGroupPageOptions,
  DeadLetterPage,
  DeadLetterPageOptions,
  DeadLetterRecord,
  DeadLetterStore,
  ReplayRecord,
} from '../dead-letters/dead-letter-store.js';
import {
  matchesDeadLetterFilter,
  selectsEveryDeadLetter,
} from '../dead-letters/matches-dead-letter-filter.js';
import { HarrierError } from '../errors/harrier-error.js';
import {
  decodeChunkEntries,
  DeadLetterKeys,
  decodeFilterChunk,
  isSelected,
  aggregatedStatuses,
  decodeGroupsPage,
  GroupSums,
  groupWithSample,
  decodeListCursor,
  encodeListCursor,
  decodeRecord,
  encodeRecordData,
  addScriptCall,
  countScriptCall,
  filterScanScriptCall,
  groupsScriptCall,
  markReplayHandledScriptCall,
  markReplayedScriptCall,
  purgeScriptCall,
  readChunkScriptCall,
  removeScriptCall,
  type ChunkEntry,
  type FilterChunk,
  type SampleRef,
  type FilterScanMode,
  type ScriptCall,
} from './dead-letters/index.js';
import type { RedisConnectionOptions } from './redis-connection.js';
import {
  connectionFor,
  evalScript,
  keyPrefixOf,
  runCommand,
  type RedisConnection,
  type RedisErrorContext,
} from './redis-support.js';

/** Options of {@link RedisDeadLetterStore}. */
export interface RedisDeadLetterStoreOptions {
  /**
   * Where Redis is (see {@link RedisConnectionOptions}): a `redis://` (or `rediss://`) URL, an
   * ioredis client to share (a `Redis`, or a `Cluster` for Redis Cluster), `{ cluster: nodes }`, or
   * ioredis options. Every key carries the prefix's hash tag, so on a cluster all share one slot.
   *
   * @remarks
   * The store creates, and on {@link RedisDeadLetterStore.close} quits, a client for a URL (or seed nodes, or options). A client
   * passed in stays the caller's: the store never quits it, never adds listeners to it, and its own
   * retry settings apply instead of `maxRetriesPerRequest` and `connectTimeoutMs` below.
   *
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key the store writes; its keys are `<prefix>:dlq:...`.
   *
   * @remarks
   * The braces make it a Redis Cluster hash tag, so every key of the store lands in one slot and its
   * Lua scripts, which reach records by id, stay valid behind a cluster-aware proxy. Stores sharing a
   * prefix share their dead letters.
   *
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
  /**
   * Most records kept; when a new record would exceed it, the oldest by first insertion is dropped.
   * @defaultValue 100000
   */
  readonly maxRecords?: number;
  /**
   * For a client the store creates: how many reconnect attempts a command waits through before it
   * fails with `redis-unavailable`; `null` waits for as long as Redis is down.
   *
   * @remarks
   * One keeps the `harrier dlq` CLI quick to report a Redis that is down (well under a second for a
   * refused connection), while a long-running worker rides out a brief blip: its client keeps
   * reconnecting in the background whatever this says, so the first command after Redis is back
   * succeeds, and a dead-lettering that failed meanwhile is retried by the broker. The offline queue
   * stays on, because without it every command sent before the first connect completes would fail.
   *
   * @defaultValue 1
   */
  readonly maxRetriesPerRequest?: number | null;
  /**
   * For a client the store creates: how long one connection attempt may take before it counts as
   * failed, in ms.
   *
   * @remarks
   * Bounds how long a command waits when Redis's host drops packets instead of refusing them: at most
   * about `(maxRetriesPerRequest + 1) * connectTimeoutMs`. A healthy Redis connects in milliseconds.
   *
   * @defaultValue 3000
   */
  readonly connectTimeoutMs?: number;
}

const DEFAULT_MAX_RECORDS = 100_000;
const DEFAULT_PAGE_LIMIT = 100;
/**
 * Index entries read per round trip while purging; also the most records a filter scan returns at
 * once, so that records written before the filter fields travel in replies of bounded size.
 */
const SCAN_CHUNK = 200;
/** Most records one page of a text search reads before it returns what it found and a cursor. */
const TEXT_SCAN_BUDGET = 10_000;
/** Ids per atomic batch in `remove`, so one script never blocks Redis for long. */
const REMOVE_BATCH = 500;

/**
 * Keeps dead letters in Redis, so they outlive restarts and every process of an application sees the
 * same ones.
 *
 * @remarks
 * Each record is a hash under `<prefix>:dlq:record:<id>`; a sorted set `<prefix>:dlq:index` scores
 * each id by an insertion sequence (`<prefix>:dlq:seq`), so lists come in first-insertion order and
 * an update keeps its place. Every write is one Lua script, so concurrent stores on the same prefix
 * never leave two records for one id or a record without its index entry. Lists, counts and groups
 * walk the index in chunks and apply the filter inside Redis, to fields each record keeps beside its
 * JSON (endpoint, type, handler, reason, status, fingerprint, last failure), so only what was asked
 * for travels; their cost still grows with the records held, not with the records matched, and
 * `maxRecords` bounds it. Purges walk and filter here.
 *
 * Failures reject with a {@link HarrierError}: `redis-unavailable` when Redis cannot be reached,
 * `redis-command-failed` when it refuses a command, `store-closed` after {@link close},
 * `invalid-cursor` and `invalid-argument` for bad paging.
 *
 * @example
 * ```ts
 * const store = new RedisDeadLetterStore({ connection: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' });
 * const { records, next } = await store.list({ endpoint: 'billing' }, { limit: 50 });
 * await store.close();
 * ```
 */
export class RedisDeadLetterStore implements DeadLetterStore {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #errors: RedisErrorContext;
  readonly #maxRecords: number;
  readonly #keys: DeadLetterKeys;
  #closed = false;

  /** @throws HarrierError `invalid-option` when `prefix` is empty or `maxRecords` is not a positive integer. */
  constructor(options: RedisDeadLetterStoreOptions) {
    const prefix = keyPrefixOf(options.prefix, 'RedisDeadLetterStore');
    const maxRecords = options.maxRecords ?? DEFAULT_MAX_RECORDS;
    if (!Number.isInteger(maxRecords) || maxRecords < 1) {
      throw new HarrierError(
        'invalid-option',
        `RedisDeadLetterStore maxRecords must be a positive integer, got ${maxRecords}: pass a whole number such as 100000, or leave it out for the default`,
      );
    }
    this.#maxRecords = maxRecords;

    this.#connection = connectionFor(options.connection, options);
    this.#client = this.#connection.client;
    this.#keys = new DeadLetterKeys(prefix, this.#client.options.keyPrefix ?? '');
    this.#errors = {
      connection: this.#connection,
      command: 'a dead-letter store command',
      keyspace: this.#keys.keyspace,
    };
  }

  add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    return this.#run(async () => {
      const key = this.#keys.record(record.id);
      const data = encodeRecordData(record);
      const reply = await this.#eval(addScriptCall(this.#keys, record, data, this.#maxRecords));
      const [first, status, replays] = reply as [string, string, string];
      // Decoded from what was written, so the caller gets exactly what a later get() returns.
      return decodeRecord(key, data, first, status, replays);
    });
  }

  get(id: string): Promise<DeadLetterRecord | undefined> {
    return this.#run(async () => {
      const key = this.#keys.record(id);
      const [data, first, status, replays] = await this.#client.hmget(
        key,
        'data',
        'first',
        'status',
        'replays',
      );
      if (data == null) return undefined;
      return decodeRecord(key, data, first ?? '0', status ?? 'dead', replays ?? '');
    });
  }

  /** @throws HarrierError `invalid-cursor` for a cursor this store did not issue, `invalid-argument` for a bad limit. */
  list(filter: DeadLetterFilter = {}, page: DeadLetterPageOptions = {}): Promise<DeadLetterPage> {
    return this.#run(async () => {
      const limit = page.limit ?? DEFAULT_PAGE_LIMIT;
      if (!Number.isInteger(limit) || limit < 1) {
        throw new HarrierError(
          'invalid-argument',
          `Dead-letter page limit must be a positive integer, got ${limit}: pass a whole number such as 100, or leave it out for the default`,
        );
      }
      const records: DeadLetterRecord[] = [];
      let from = page.cursor === undefined ? undefined : decodeListCursor(page.cursor);
      let lastSeq = 0;
      let read = 0;
      for (;;) {
        // One match past the page says whether there is a next page, so a page that ends exactly at
        // the last match reports none.
        const chunk = await this.#filterChunk(filter, 'list', from, limit + 1 - records.length);
        for (const entry of chunk.entries) {
          if (!isSelected(entry, filter)) continue;
          if (records.length === limit) return { records, next: encodeListCursor(lastSeq) };
          records.push(entry.record);
          lastSeq = entry.seq;
        }
        if (chunk.ended || chunk.last === undefined) return { records, next: undefined };
        from = chunk.last;
        read += chunk.read;
        // A text search reads a bounded number of records per page, so a rare text still answers
        // quickly: the page then ends where the reading stopped, however few it holds.
        if (filter.text !== undefined && read >= TEXT_SCAN_BUDGET)
          return { records, next: encodeListCursor(from) };
      }
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.count}
   *
   * @remarks
   * A filter of status, fingerprint and time window alone is answered from the failure-group
   * aggregates; any other field is applied inside Redis, chunk by chunk, to fields each record keeps beside its JSON
   * (a text search decodes the JSON there), so only the number travels.
   */
  count(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(async () => {
      if (selectsEveryDeadLetter(filter)) return await this.#client.zcard(this.#keys.index);
      // The group sets are scored by lastFailedAt, so a time window is a range of them.
      const { since: _since, until: _until, ...untimed } = filter;
      const statuses = aggregatedStatuses(untimed);
      if (statuses !== undefined) {
        const n = Number(await this.#eval(countScriptCall(this.#keys, filter, statuses)));
        if (n >= 0) return n;
      }
      let n = 0;
      for await (const chunk of this.#filterChunks(filter, 'count')) {
        n += chunk.selected + chunk.entries.filter((entry) => isSelected(entry, filter)).length;
      }
      return n;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.groups}
   *
   * @remarks
   * Every write keeps per-fingerprint aggregates in the same script as the record, so a filter of
   * status and fingerprint alone is answered from them in time that grows with the groups on the
   * page, not with the records held. Any other field (endpoint, time window, text, ...) is applied
   * inside Redis chunk by chunk, as in `count`, which returns per-fingerprint sums; records written
   * by a Harrier from before the aggregates or the filter fields are read and filtered here.
   */
  groups(filter: DeadLetterFilter = {}, page: DeadLetterGroupPageOptions = {}): Promise<DeadLetterGroupPage> {
    return this.#run(async () => {
      const limit = groupPageLimit(page);
      const after = page.cursor === undefined ? undefined : decodeGroupCursor(page.cursor);
      const statuses = aggregatedStatuses(filter);
      if (statuses !== undefined) {
        const reply = (await this.#eval(
          groupsScriptCall(this.#keys, filter, statuses, after, limit),
        )) as unknown[];
        if (reply[0] === 1) return decodeGroupsPage(reply.slice(1), limit);
      }
      const sums = new GroupSums();
      for await (const chunk of this.#filterChunks(filter, 'groups')) {
        for (const sum of chunk.groups) sums.add(sum);
        for (const entry of chunk.entries) {
          if (isSelected(entry, filter)) sums.addRecord(entry.record, entry.seq);
        }
      }
      const { groups, next } = sums.page(after, limit);
      const samples = await this.#samples(groups.map((group) => group.sample));
      return { groups: groups.map((group, i) => groupWithSample(group, samples[i])), next };
    });
  }

  markReplayed(id: string, replay: ReplayRecord): Promise<boolean> {
    return this.#run(async () => {
      const reply = await this.#eval(markReplayedScriptCall(this.#keys, id, replay));
      return reply === 1;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.markReplayHandled}
   *
   * @remarks
   * One script, so it never marks a record that died again meanwhile.
   */
  markReplayHandled(id: string, at: number): Promise<boolean> {
    return this.#run(async () => {
      const reply = await this.#eval(markReplayHandledScriptCall(this.#keys, id, at));
      return reply === 1;
    });
  }

  remove(ids: readonly string[]): Promise<number> {
    return this.#run(async () => {
      // An id given twice is counted once, as the in-memory store does.
      const unique = [...new Set(ids)];
      let n = 0;
      for (let i = 0; i < unique.length; i += REMOVE_BATCH) {
        const batch = unique.slice(i, i + REMOVE_BATCH);
        n += Number(await this.#eval(removeScriptCall(this.#keys, batch)));
      }
      return n;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.purge}
   *
   * @remarks
   * Deletes chunk by chunk, each chunk atomically. A record changed by another process between being
   * read and being deleted is kept, so a purge never deletes a record that no longer matches.
   */
  purge(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(async () => {
      let n = 0;
      let after: number | undefined;
      for (;;) {
        const chunk = await this.#readChunk(after);
        const doomed = chunk.filter(
          (entry): entry is ChunkEntry & { record: DeadLetterRecord; version: string } =>
            entry.record !== undefined &&
            entry.version !== undefined &&
            matchesDeadLetterFilter(entry.record, filter),
        );
        if (doomed.length > 0) {
          n += Number(await this.#eval(purgeScriptCall(this.#keys, doomed)));
        }
        const last = chunk.at(-1);
        if (last === undefined || chunk.length < SCAN_CHUNK) return n;
        after = last.seq;
      }
    });
  }

  /**
   * Quits the client the store created from a URL; a client passed in is left open. Records stay in
   * Redis. Later calls reject with `store-closed`; closing twice is harmless.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#connection.close();
  }

  /** Every chunk of a filter scan from the start of the index to its end. */
  async *#filterChunks(filter: DeadLetterFilter, mode: 'count' | 'groups'): AsyncGenerator<FilterChunk> {
    let from: number | undefined;
    for (;;) {
      const chunk = await this.#filterChunk(filter, mode, from, SCAN_CHUNK);
      yield chunk;
      if (chunk.ended || chunk.last === undefined) return;
      from = chunk.last;
    }
  }

  /** One run of the filter scan script (filter-scan-script.ts) after sequence `after`. */
  async #filterChunk(
    filter: DeadLetterFilter,
    mode: FilterScanMode,
    after: number | undefined,
    most: number,
  ): Promise<FilterChunk> {
    const reply = await this.#eval(filterScanScriptCall(this.#keys, filter, mode, after, most));
    return decodeFilterChunk(reply, this.#keys);
  }

  /** The sample record of each group: the one it holds already, else read now (undefined if gone). */
  async #samples(samples: readonly SampleRef[]): Promise<(DeadLetterRecord | undefined)[]> {
    return Promise.all(samples.map(async (sample) => sample.record ?? (await this.get(sample.id))));
  }

  async #readChunk(after: number | undefined): Promise<ChunkEntry[]> {
    const reply = (await this.#eval(readChunkScriptCall(this.#keys, after, SCAN_CHUNK))) as unknown[];
    return decodeChunkEntries(reply, this.#keys);
  }

  #eval(call: ScriptCall): Promise<unknown> {
    return evalScript(this.#client, call.script, call.keys, call.args);
  }

  /** Runs `body` on an open store and turns Redis's failures into {@link HarrierError}s. */
  async #run<T>(body: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The Redis dead-letter store is closed: create a new RedisDeadLetterStore to use dead letters again',
      );
    }
    return runCommand(body, this.#errors);
  }
}
