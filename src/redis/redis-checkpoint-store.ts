import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { HarrierError } from '../errors/harrier-error.js';
import {
  checkCheckpointOffset,
  projectionRebuiltError,
  REQUESTED_REBUILD_PREFIX,
  type Checkpoint,
  type CheckpointStore,
  type CommitOptions,
  type ProjectionGeneration,
  type RebuildMarker,
} from '../log/checkpoint-store.js';
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
 * KEYS: the projection's hash, the projection set, the generations hash, the rebuilds hash. ARGV:
 * offset field, updatedAt field, offset, nowMs, projection, expected generation ('' for none).
 * Raises the stored offset unless it is already as high; returns the stored one, or
 * `stale:<generation>:<1 when a rebuild is under way>` when the expected generation is not the
 * stored one or a rebuild is under way (nothing written).
 */
const COMMIT_SCRIPT = `
if ARGV[6] ~= '' then
  local generation = tonumber(redis.call('HGET', KEYS[3], ARGV[5]) or '0')
  local rebuilding = redis.call('HEXISTS', KEYS[4], ARGV[5])
  if generation ~= tonumber(ARGV[6]) or rebuilding == 1 then
    return 'stale:' .. generation .. ':' .. rebuilding
  end
end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored and tonumber(stored) >= tonumber(ARGV[3]) then return stored end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], ARGV[2], ARGV[4])
redis.call('SADD', KEYS[2], ARGV[5])
return ARGV[3]
`;

const COMMIT = redisScript(COMMIT_SCRIPT);

/**
 * KEYS: the projection's hash, the projection set, the generations hash, the rebuilds hash. ARGV:
 * projection, marker (`<startedAt>|<id>`), the id of the rebuild to replace ('' for any). Sets the
 * marker, raises the generation and removes the checkpoints; returns the new generation, or nil
 * when the marker is not the one to replace.
 */
const BEGIN_REBUILD = redisScript(`
if ARGV[3] ~= '' then
  local marker = redis.call('HGET', KEYS[4], ARGV[1])
  if not marker then return nil end
  if string.sub(marker, string.find(marker, '|', 1, true) + 1) ~= ARGV[3] then return nil end
end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
`);

/** KEYS: the rebuilds hash. ARGV: projection, rebuild id. Clears the marker when it is that rebuild's. */
const END_REBUILD = redisScript(`
local marker = redis.call('HGET', KEYS[1], ARGV[1])
if not marker then return 0 end
if string.sub(marker, string.find(marker, '|', 1, true) + 1) ~= ARGV[2] then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
`);

/** A marker as the rebuilds hash holds it: `<startedAt>|<id>` (the id may hold '|', the time never). */
function decodeMarker(value: string | null | undefined): RebuildMarker | undefined {
  if (value === null || value === undefined) return undefined;
  const at = value.indexOf('|');
  if (at < 0) return undefined;
  return { id: value.slice(at + 1), startedAt: Number(value.slice(0, at)) };
}

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
 * Commits are one Lua script each, so concurrent runners never lower a checkpoint. A hash
 * `<prefix>:ckpt:generations` holds each projection's generation, and a hash `<prefix>:ckpt:rebuilds`
 * the marker of a rebuild under way (`<startedAt>|<id>`); `beginRebuild` (and `reset`) and a commit given
 * a generation read and change them in the same script as the checkpoints.
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
  readonly #generationsKey: string;
  readonly #rebuildsKey: string;
  readonly #errors: RedisErrorContext;
  #closed = false;

  /** @throws HarrierError `invalid-option` when `prefix` is empty. */
  constructor(options: RedisCheckpointStoreOptions) {
    const prefix = keyPrefixOf(options.prefix, 'RedisCheckpointStore');
    this.#keyspace = `${prefix}:ckpt:`;
    this.#projectionsKey = `${this.#keyspace}projections`;
    this.#generationsKey = `${this.#keyspace}generations`;
    this.#rebuildsKey = `${this.#keyspace}rebuilds`;
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
   * @throws HarrierError `invalid-argument` when `offset` is not a whole number from 0,
   *   `projection-rebuilt` when `options.generation` is stale or a rebuild is under way.
   */
  commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
    options?: CommitOptions,
  ): Promise<number> {
    return this.#run(async () => {
      checkCheckpointOffset(projection, topic, partition, offset);
      const field = fieldOf(topic, partition);
      const keys = [this.#hashKey(projection), this.#projectionsKey, this.#generationsKey, this.#rebuildsKey];
      const expected = options?.generation;
      const args = [
        field,
        `${field}${AT_SUFFIX}`,
        String(offset),
        String(nowMs),
        projection,
        expected === undefined ? '' : String(expected),
      ];
      const reply = String(await evalScript(this.#client, COMMIT, keys, args));
      if (expected !== undefined && reply.startsWith('stale:')) {
        const [, generation, rebuilding] = reply.split(':');
        throw projectionRebuiltError(projection, expected, {
          generation: Number(generation),
          rebuilding: rebuilding === '1',
        });
      }
      return Number(reply);
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

  async reset(projection: string): Promise<void> {
    await this.beginRebuild(projection, `${REQUESTED_REBUILD_PREFIX}${randomUUID()}`, Date.now());
  }

  generation(projection: string): Promise<ProjectionGeneration> {
    return this.#run(async () => {
      const [generation, marker] = await Promise.all([
        this.#client.hget(this.#generationsKey, projection),
        this.#client.hget(this.#rebuildsKey, projection),
      ]);
      return { projection, generation: Number(generation ?? '0'), rebuild: decodeMarker(marker) };
    });
  }

  /** @remarks Sorted by projection. */
  generations(): Promise<ProjectionGeneration[]> {
    return this.#run(async () => {
      const [generations, markers] = await Promise.all([
        this.#client.hgetall(this.#generationsKey),
        this.#client.hgetall(this.#rebuildsKey),
      ]);
      const names = [...new Set([...Object.keys(generations), ...Object.keys(markers)])].sort(compare);
      return names.map((projection) => ({
        projection,
        generation: Number(generations[projection] ?? '0'),
        rebuild: decodeMarker(markers[projection]),
      }));
    });
  }

  beginRebuild(
    projection: string,
    id: string,
    nowMs: number,
    replacing?: string,
  ): Promise<ProjectionGeneration | undefined> {
    return this.#run(async () => {
      const keys = [this.#hashKey(projection), this.#projectionsKey, this.#generationsKey, this.#rebuildsKey];
      const reply = await evalScript(this.#client, BEGIN_REBUILD, keys, [
        projection,
        `${nowMs}|${id}`,
        replacing ?? '',
      ]);
      if (reply === null || reply === undefined) return undefined;
      return { projection, generation: Number(reply), rebuild: { id, startedAt: nowMs } };
    });
  }

  endRebuild(projection: string, id: string): Promise<boolean> {
    return this.#run(async () => {
      const reply = await evalScript(this.#client, END_REBUILD, [this.#rebuildsKey], [projection, id]);
      return Number(reply) === 1;
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
