import type { Cluster, Redis } from 'ioredis';
import { HarrierError } from '../errors/harrier-error.js';
import { checkCheckpointOffset, type Checkpoint, type CheckpointStore } from '../log/checkpoint-store.js';
import {
  connectionFor,
  evalScript,
  keyPrefixOf,
  redisScript,
  runCommand,
  type RedisConnection,
  type RedisErrorContext,
} from './redis-support.js';
import type { RedisConnectionOptions } from './redis-connection.js';

/** Options of {@link RedisCheckpointStore}. */
export interface RedisCheckpointStoreOptions {
  /**
   * Where Redis is (see {@link RedisConnectionOptions}): a `redis://` (or `rediss://`) URL, an
   * ioredis client to share (a `Redis`, or a `Cluster` for Redis Cluster), `{ cluster: nodes }`, or
   * ioredis options. Every key carries the prefix's hash tag, so on a cluster all share one slot.
   *
   * @remarks
   * The store creates, and on {@link RedisCheckpointStore.close} quits, a client for a URL (or seed nodes, or options); a
   * command on it waits through one reconnect attempt (connect timeout 3 s) before it fails with
   * `redis-unavailable`. A client passed in stays the caller's: the store never quits it and never
   * adds listeners to it.
   *
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key the store writes; its keys are `<prefix>:ckpt:...`.
   *
   * @remarks
   * The braces make it a Redis Cluster hash tag, so every key of the store lands in one slot.
   * Stores sharing a prefix share their checkpoints; give it the prefix of the event log whose
   * offsets it records.
   *
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
}

/** Suffix of the field that holds a checkpoint's updatedAt, beside the one that holds its offset. */
const AT_SUFFIX = '|at';

/**
 * KEYS: the projection's hash, the projection set. ARGV: offset field, updatedAt field, offset,
 * nowMs, projection. Raises the stored offset unless it is already as high; returns the stored one.
 */
const COMMIT_SCRIPT = `
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored and tonumber(stored) >= tonumber(ARGV[3]) then return stored end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], ARGV[2], ARGV[4])
redis.call('SADD', KEYS[2], ARGV[5])
return ARGV[3]
`;

const COMMIT = redisScript(COMMIT_SCRIPT);

function fieldOf(topic: string, partition: number): string {
  return `${topic}|${partition}`;
}

const compare = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The checkpoints held in one projection's hash (fields as HGETALL returns them). */
function decodeHash(projection: string, hash: Record<string, string>): Checkpoint[] {
  const checkpoints: Checkpoint[] = [];
  for (const [field, value] of Object.entries(hash)) {
    if (field.endsWith(AT_SUFFIX)) continue;
    // The topic may hold '|', a partition never does.
    const at = field.lastIndexOf('|');
    if (at < 0) continue;
    checkpoints.push({
      projection,
      topic: field.slice(0, at),
      partition: Number(field.slice(at + 1)),
      offset: Number(value),
      updatedAt: Number(hash[`${field}${AT_SUFFIX}`] ?? '0'),
    });
  }
  return checkpoints;
}

/**
 * Keeps projection checkpoints in Redis, so they outlive restarts and every process of an
 * application sees the same ones.
 *
 * @remarks
 * Each projection is a hash `<prefix>:ckpt:projection:<name>` with, per partition, a field
 * `<topic>|<partition>` holding the offset and a field `<topic>|<partition>|at` holding when it was
 * last raised. A set `<prefix>:ckpt:projections` names the projections, for `list()` and `lowest`.
 * Commits are one Lua script each, so concurrent runners never lower a checkpoint.
 *
 * Failures reject with a {@link HarrierError}: `redis-unavailable` when Redis cannot be reached,
 * `redis-command-failed` when it refuses a command, `store-closed` after {@link close},
 * `invalid-argument` for an offset that is not a whole number from 0.
 *
 * @example
 * ```ts
 * const checkpoints = new RedisCheckpointStore({ connection: 'redis://127.0.0.1:6379' });
 * await checkpoints.commit('order-totals', 'orders', 3, 41, Date.now());
 * await checkpoints.close();
 * ```
 */
export class RedisCheckpointStore implements CheckpointStore {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #keyspace: string;
  readonly #projectionsKey: string;
  readonly #errors: RedisErrorContext;
  #closed = false;

  /** @throws HarrierError `invalid-option` when `prefix` is empty. */
  constructor(options: RedisCheckpointStoreOptions) {
    const prefix = keyPrefixOf(options.prefix, 'RedisCheckpointStore');
    this.#keyspace = `${prefix}:ckpt:`;
    this.#projectionsKey = `${this.#keyspace}projections`;
    this.#connection = connectionFor(options.connection);
    this.#client = this.#connection.client;
    this.#errors = {
      connection: this.#connection,
      command: 'a checkpoint store command',
      keyspace: this.#keyspace,
    };
  }

  get(projection: string, topic: string, partition: number): Promise<number | undefined> {
    return this.#run(async () => {
      const value = await this.#client.hget(this.#hashKey(projection), fieldOf(topic, partition));
      return value === null ? undefined : Number(value);
    });
  }

  /**
   * @remarks Committing the stored offset again leaves its `updatedAt` as it was: nothing was raised.
   * @throws HarrierError `invalid-argument` when `offset` is not a whole number from 0.
   */
  commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
  ): Promise<number> {
    return this.#run(async () => {
      checkCheckpointOffset(projection, topic, partition, offset);
      const field = fieldOf(topic, partition);
      const keys = [this.#hashKey(projection), this.#projectionsKey];
      const args = [field, `${field}${AT_SUFFIX}`, String(offset), String(nowMs), projection];
      return Number(await evalScript(this.#client, COMMIT, keys, args));
    });
  }

  /** @remarks Sorted by projection, topic and partition. */
  list(projection?: string): Promise<Checkpoint[]> {
    return this.#run(async () => {
      const names =
        projection === undefined ? await this.#client.smembers(this.#projectionsKey) : [projection];
      const hashes = await this.#hashes(names);
      const all = names.flatMap((name, i) => decodeHash(name, hashes[i] ?? {}));
      all.sort(
        (a, b) =>
          compare(a.projection, b.projection) || compare(a.topic, b.topic) || a.partition - b.partition,
      );
      return all;
    });
  }

  reset(projection: string): Promise<void> {
    return this.#run(async () => {
      await this.#client.multi().del(this.#hashKey(projection)).srem(this.#projectionsKey, projection).exec();
    });
  }

  lowest(topic: string, partition: number): Promise<number | undefined> {
    return this.#run(async () => {
      const names = await this.#client.smembers(this.#projectionsKey);
      if (names.length === 0) return undefined;
      const pipeline = this.#client.pipeline();
      const field = fieldOf(topic, partition);
      for (const name of names) pipeline.hget(this.#hashKey(name), field);
      let lowest: number | undefined;
      for (const [error, value] of (await pipeline.exec()) ?? []) {
        if (error) throw error;
        if (typeof value !== 'string') continue;
        const offset = Number(value);
        if (lowest === undefined || offset < lowest) lowest = offset;
      }
      return lowest;
    });
  }

  /**
   * Quits the client the store created from a URL; a client passed in is left open. Checkpoints
   * stay in Redis. Later calls reject with `store-closed`; closing twice is harmless.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#connection.close();
  }

  #hashKey(projection: string): string {
    return `${this.#keyspace}projection:${projection}`;
  }

  /** The hashes of some projections, in one round trip. */
  async #hashes(names: readonly string[]): Promise<Record<string, string>[]> {
    if (names.length === 0) return [];
    const pipeline = this.#client.pipeline();
    for (const name of names) pipeline.hgetall(this.#hashKey(name));
    const replies = (await pipeline.exec()) ?? [];
    return replies.map(([error, value]) => {
      if (error) throw error;
      return value as Record<string, string>;
    });
  }

  /** Runs `body` on an open store and turns Redis's failures into {@link HarrierError}s. */
  async #run<T>(body: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The Redis checkpoint store is closed: create a new RedisCheckpointStore to use checkpoints again',
      );
    }
    return runCommand(body, this.#errors);
  }
}
