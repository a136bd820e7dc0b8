import type { Cluster, Redis } from 'ioredis';
import { HarrierError } from '../errors/harrier-error.js';
import { SagaConflictError } from '../errors/saga-conflict-error.js';
import {
  compareSagaPositions,
  completedRetentionOf,
  decodeSagaCursor,
  encodeSagaCursor,
  sagaPageLimit,
  serializeSagaWrite,
  type SagaAppliedStep,
  type SagaInstance,
  type SagaListFilter,
  type SagaPage,
  type SagaPageOptions,
  type SagaSummary,
  type SagaStatus,
  type SagaStore,
  type SagaTimeoutRecord,
  type SagaWrite,
} from '../sagas/saga-store.js';
import type { RedisConnectionOptions } from './redis-connection.js';
import {
  connectionFor,
  evalScript,
  keyPrefixOf,
  redisScript,
  runCommand,
  type RedisConnection,
  type RedisErrorContext,
} from './redis-support.js';

/** Options of {@link RedisSagaStore}. */
export interface RedisSagaStoreOptions {
  /**
   * Where Redis is (see {@link RedisConnectionOptions}): a `redis://` (or `rediss://`) URL, an
   * ioredis client to share (a `Redis`, or a `Cluster` for Redis Cluster), `{ cluster: nodes }`, or
   * ioredis options. Every key carries the prefix's hash tag, so on a cluster all share one slot.
   *
   * @remarks
   * The store creates, and on {@link RedisSagaStore.close} quits, a client for a URL (or seed nodes,
   * or options). A client passed in stays the caller's: the store never quits it and never adds
   * listeners to it.
   *
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key the store writes; its keys are `<prefix>:saga:...`.
   *
   * @remarks
   * The braces make it a Redis Cluster hash tag, so every key of the store lands in one slot (the
   * slot of the rest of Harrier under the same prefix) and its Lua scripts stay valid on a cluster.
   * Stores sharing a prefix share their instances.
   *
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
  /**
   * How long a completed instance is kept after its latest save, in ms: the PEXPIRE the save sets
   * on the instance's key, in the same script.
   * @defaultValue 604800000 (7 days)
   */
  readonly completedRetentionMs?: number;
}

/** Index entries read per script call while listing. */
const SCAN_CHUNK = 200;

/** The fields of an instance's hash, in the order the scripts return them. */
const FIELDS = [
  'state',
  'status',
  'version',
  'startedAt',
  'updatedAt',
  'completedAt',
  'timeouts',
  'stateVersion',
  'applied',
] as const;
/**
 * The fields `list` reads: all but `applied`, which can be large and only `get` returns (it stays
 * last in {@link FIELDS}).
 */
const SUMMARY_FIELDS = FIELDS.filter((f) => f !== 'applied');
const HMGET_SUMMARY_FIELDS = SUMMARY_FIELDS.map((f) => `'${f}'`).join(', ');

/**
 * KEYS: instance, index, names. ARGV: expected version, state, status, timeouts, now, retention ms,
 * saga, id, applied, state version. Compare-and-set: returns {0, stored version} on a mismatch, else writes the
 * instance, sets or clears its expiry, indexes it, and returns {1, version, startedAt, completedAt
 * or ''}.
 */
const SAVE_SCRIPT = `
local stored = redis.call('HMGET', KEYS[1], 'version', 'status', 'startedAt', 'completedAt')
local actual = tonumber(stored[1] or '0')
if actual ~= tonumber(ARGV[1]) then return {0, actual} end
local version = actual + 1
local startedAt = stored[3] or ARGV[5]
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'status', ARGV[3], 'timeouts', ARGV[4], 'version', version,
  'startedAt', startedAt, 'updatedAt', ARGV[5], 'applied', ARGV[9], 'stateVersion', ARGV[10])
local completedAt = ''
if ARGV[3] == 'completed' then
  completedAt = (stored[2] == 'completed' and stored[4]) or ARGV[5]
  redis.call('HSET', KEYS[1], 'completedAt', completedAt)
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
else
  redis.call('HDEL', KEYS[1], 'completedAt')
  redis.call('PERSIST', KEYS[1])
end
redis.call('ZADD', KEYS[2], 0, ARGV[8])
redis.call('SADD', KEYS[3], ARGV[7])
return {1, version, startedAt, completedAt}
`;

/**
 * KEYS: index, names. ARGV: saga, ZRANGEBYLEX min, count, instance key prefix of the saga. Returns,
 * per live entry: id, then the fields of {@link SUMMARY_FIELDS}, and as its last element whether the
 * index may hold more. Entries whose instance expired or vanished are removed from the index (and an
 * emptied index from the names), in this script, so a concurrent create is never unindexed.
 *
 * The instance keys are built in the script from ARGV[4], an exception to declaring every key in
 * KEYS (the ids are only known once the index is read): valid on Redis Cluster because every key of
 * the store carries the prefix's hash tag, so all are in the slot of KEYS[1].
 */
const READ_CHUNK_SCRIPT = `
local count = tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], '+', 'LIMIT', 0, count)
local out = {}
for _, id in ipairs(ids) do
  local fields = redis.call('HMGET', ARGV[4] .. id, ${HMGET_SUMMARY_FIELDS})
  if fields[3] then
    out[#out + 1] = id
    for j = 1, ${SUMMARY_FIELDS.length} do out[#out + 1] = fields[j] or '' end
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
out[#out + 1] = (#ids == count) and 1 or 0
return out
`;

/** KEYS: instance, index, names. ARGV: saga, id. Returns 1 when the instance existed. */
const REMOVE_SCRIPT = `
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], ARGV[1]) end
return n
`;

const SCRIPTS = {
  save: redisScript(SAVE_SCRIPT),
  readChunk: redisScript(READ_CHUNK_SCRIPT),
  remove: redisScript(REMOVE_SCRIPT),
} as const;

/** UTF-8 byte order, the order of Redis's sorted sets and of {@link compareSagaPositions}. */
function compareNames(a: string, b: string): number {
  return compareSagaPositions({ saga: a, id: '' }, { saga: b, id: '' });
}

/**
 * Keeps saga instances in Redis: one hash per instance, written by compare-and-set in one Lua call.
 *
 * @remarks
 * Keys, all under the prefix's hash tag (one cluster slot):
 * - `<prefix>:saga:i:<saga length>:<saga>:<id>`: a hash per instance with fields `state`,
 *   `applied` and `timeouts` (JSON), `status`, `version`, `stateVersion`, `startedAt`, `updatedAt`,
 *   `completedAt`.
 * - `<prefix>:saga:index:<saga>`: a sorted set of the saga's ids (score 0, so ordered by bytes), for
 *   `list`.
 * - `<prefix>:saga:names`: a set of the saga names with an index.
 *
 * `save` reads the version, writes the hash, sets `PEXPIRE completedRetentionMs` on a completed
 * instance (or `PERSIST` on an active one) and indexes it, all in one script, so two concurrent
 * saves of one version never both win. An expired instance leaves its index entry behind; `list`
 * skips it and removes it in the same script that found it missing.
 *
 * Failures reject with a {@link HarrierError}: `saga-conflict` ({@link SagaConflictError}),
 * `redis-unavailable`, `redis-command-failed`, `store-closed` after {@link RedisSagaStore.close},
 * `invalid-argument`, `invalid-cursor`.
 *
 * @example
 * ```ts
 * const sagas = new RedisSagaStore({ connection: 'redis://127.0.0.1:6379' });
 * const { instances } = await sagas.list({ saga: 'order-fulfilment', status: 'active' });
 * await sagas.close();
 * ```
 */
export class RedisSagaStore implements SagaStore {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #keyspace: string;
  readonly #namesKey: string;
  readonly #retentionMs: number;
  readonly #errors: RedisErrorContext;
  #closed = false;

  /**
   * @throws HarrierError `invalid-option` when `prefix` is empty or `completedRetentionMs` is not a
   * positive whole number.
   */
  constructor(options: RedisSagaStoreOptions) {
    const prefix = keyPrefixOf(options.prefix, 'RedisSagaStore');
    this.#retentionMs = completedRetentionOf(options.completedRetentionMs, 'RedisSagaStore');
    this.#keyspace = `${prefix}:saga:`;
    this.#namesKey = `${this.#keyspace}names`;
    this.#connection = connectionFor(options.connection);
    this.#client = this.#connection.client;
    this.#errors = {
      connection: this.#connection,
      command: 'a saga store command',
      keyspace: this.#keyspace,
    };
  }

  get(saga: string, id: string): Promise<SagaInstance | undefined> {
    return this.#run(async () => {
      const fields = await this.#client.hmget(this.#instanceKey(saga, id), ...FIELDS);
      return fields[2] == null
        ? undefined
        : this.#decode(
            saga,
            id,
            fields.map((f) => f ?? ''),
          );
    });
  }

  save(write: SagaWrite, expectedVersion: number): Promise<SagaInstance> {
    return this.#run(async () => {
      const json = serializeSagaWrite(write, expectedVersion);
      const reply = (await evalScript(
        this.#client,
        SCRIPTS.save,
        [this.#instanceKey(write.saga, write.id), this.#indexKey(write.saga), this.#namesKey],
        [
          String(expectedVersion),
          json.state,
          write.status,
          json.timeouts,
          String(write.now),
          String(this.#retentionMs),
          write.saga,
          write.id,
          json.applied,
          String(json.stateVersion),
        ],
      )) as [number, number, string?, string?];
      const [ok, version, startedAt, completedAt] = reply;
      if (ok !== 1) throw new SagaConflictError(write.saga, write.id, expectedVersion, version);
      return {
        saga: write.saga,
        id: write.id,
        state: JSON.parse(json.state) as unknown,
        stateVersion: json.stateVersion,
        version,
        status: write.status,
        startedAt: Number(startedAt),
        updatedAt: write.now,
        ...(completedAt === undefined || completedAt === '' ? {} : { completedAt: Number(completedAt) }),
        timeouts: JSON.parse(json.timeouts) as SagaTimeoutRecord[],
        applied: JSON.parse(json.applied) as SagaAppliedStep[],
      };
    });
  }

  list(filter: SagaListFilter = {}, page: SagaPageOptions = {}): Promise<SagaPage> {
    return this.#run(async () => {
      const limit = sagaPageLimit(page.limit);
      const after = page.cursor === undefined ? undefined : decodeSagaCursor(page.cursor);
      const names =
        filter.saga === undefined
          ? (await this.#client.smembers(this.#namesKey)).sort(compareNames)
          : [filter.saga];
      const found: SagaSummary[] = [];
      for (const saga of names) {
        if (after !== undefined && compareNames(saga, after.saga) < 0) continue;
        const start = after !== undefined && after.saga === saga ? after.id : undefined;
        await this.#collect(saga, start, filter.status, limit + 1 - found.length, found);
        if (found.length > limit) break;
      }
      const instances = found.slice(0, limit);
      const last = instances.at(-1);
      return found.length > limit && last !== undefined
        ? { instances, next: encodeSagaCursor(last) }
        : { instances };
    });
  }

  remove(saga: string, id: string): Promise<boolean> {
    return this.#run(async () => {
      const removed = await evalScript(
        this.#client,
        SCRIPTS.remove,
        [this.#instanceKey(saga, id), this.#indexKey(saga), this.#namesKey],
        [saga, id],
      );
      return Number(removed) === 1;
    });
  }

  /**
   * Quits the client the store created from a URL; a client passed in is left open. Instances stay
   * in Redis. Later calls reject with `store-closed`; closing twice is harmless.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#connection.close();
  }

  /** Appends to `found` up to `wanted` instances of `saga` after id `afterId`, in id order. */
  async #collect(
    saga: string,
    afterId: string | undefined,
    status: SagaStatus | undefined,
    wanted: number,
    found: SagaSummary[],
  ): Promise<void> {
    let min = afterId === undefined ? '-' : `(${afterId}`;
    let taken = 0;
    for (;;) {
      const reply = (await evalScript(
        this.#client,
        SCRIPTS.readChunk,
        [this.#indexKey(saga), this.#namesKey],
        // Keys built in a script do not get the client's ioredis `keyPrefix`: spell it out.
        [
          saga,
          min,
          // A chunk no larger than the page needs: a status filter may skip some, then it reads on.
          String(Math.min(SCAN_CHUNK, wanted - taken)),
          `${this.#client.options.keyPrefix ?? ''}${this.#instancePrefix(saga)}`,
        ],
      )) as (string | number)[];
      const more = reply.pop() === 1;
      const width = SUMMARY_FIELDS.length + 1;
      for (let at = 0; at + width <= reply.length; at += width) {
        const id = String(reply[at]);
        min = `(${id}`;
        const instance = this.#decodeSummary(saga, id, reply.slice(at + 1, at + width).map(String));
        if (status !== undefined && instance.status !== status) continue;
        found.push(instance);
        if (++taken === wanted) return;
      }
      // When every entry of a chunk had expired, the script removed them, so `min` moves on anyway.
      if (!more) return;
    }
  }

  #decode(saga: string, id: string, fields: readonly string[]): SagaInstance {
    const applied = fields[SUMMARY_FIELDS.length];
    const summary = this.#decodeSummary(saga, id, fields);
    return this.#parsing(saga, id, () => ({
      ...summary,
      // An instance saved before the field existed has none.
      applied: applied === undefined || applied === '' ? [] : (JSON.parse(applied) as SagaAppliedStep[]),
    }));
  }

  /** An instance from the fields of {@link SUMMARY_FIELDS}, in that order. */
  #decodeSummary(saga: string, id: string, fields: readonly string[]): SagaSummary {
    const [state, status, version, startedAt, updatedAt, completedAt, timeouts, stateVersion] = fields;
    return this.#parsing(saga, id, () => ({
      saga,
      id,
      state: JSON.parse(state ?? '') as unknown,
      // An instance saved before the field existed has none: its state is of version 1.
      stateVersion: stateVersion === undefined || stateVersion === '' ? 1 : Number(stateVersion),
      version: Number(version),
      status: status as SagaStatus,
      startedAt: Number(startedAt),
      updatedAt: Number(updatedAt),
      ...(completedAt === undefined || completedAt === '' ? {} : { completedAt: Number(completedAt) }),
      timeouts: JSON.parse(timeouts ?? '') as SagaTimeoutRecord[],
    }));
  }

  /** `parse()`, turning invalid JSON into `saga-corrupt`. */
  #parsing<T>(saga: string, id: string, parse: () => T): T {
    try {
      return parse();
    } catch (error) {
      throw new HarrierError(
        'saga-corrupt',
        `Saga "${saga}" instance "${id}" in Redis is not valid JSON: something other than Harrier wrote to "${this.#instanceKey(saga, id)}"; remove it, and give the store a prefix of its own`,
        { cause: error },
      );
    }
  }

  #instancePrefix(saga: string): string {
    return `${this.#keyspace}i:${saga.length}:${saga}:`;
  }

  #instanceKey(saga: string, id: string): string {
    return `${this.#instancePrefix(saga)}${id}`;
  }

  #indexKey(saga: string): string {
    return `${this.#keyspace}index:${saga}`;
  }

  /** Runs `body` on an open store and turns Redis's failures into {@link HarrierError}s. */
  async #run<T>(body: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The Redis saga store is closed: create a new RedisSagaStore to use saga instances again',
      );
    }
    return runCommand(body, this.#errors);
  }
}
