import type { Cluster, Redis } from 'ioredis';
import { HarrierError } from '../errors/harrier-error.js';
import {
  decodeScheduleRecord,
  decodeScheduleTickError,
  encodeScheduleDefinition,
  encodeScheduleTickError,
  type ScheduleRecord,
  type ScheduleTickError,
} from '../schedules/schedule-record.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';
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

/** Options of {@link RedisScheduleStore}. */
export interface RedisScheduleStoreOptions {
  /**
   * Where Redis is: a `redis://` URL, an ioredis client to share, `{ cluster: nodes }`, or ioredis
   * options (see {@link RedisConnectionOptions}). A client passed in stays the caller's.
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key the store writes; its keys are `<prefix>:sched:...`. Processes that share
   * schedules share the prefix.
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
}

/** Lua: returns from the script when the schedule ARGV[1] is gone or has a tick at or after ARGV[2]. */
const UNLESS_PENDING = `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local stored = redis.call('HGET', KEYS[2], ARGV[1])
if stored then
  local last = tonumber(string.sub(stored, 1, string.find(stored, ':', 1, true) - 1))
  if last and last >= tonumber(ARGV[2]) then return 0 end
end
`;

/**
 * KEYS: the schedules hash, the ticks hash, the errors hash. ARGV: name, tickAt,
 * `<tickAt>:<nextRunAt>:<messageId>`. Records the tick and clears the last error unless the schedule
 * is gone or has a tick at or after it; 1 when recorded.
 */
const RECORD_TICK = redisScript(`${UNLESS_PENDING}
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
`);

/**
 * KEYS: the schedules hash, the ticks hash, the errors hash. ARGV: name, tickAt, the error's JSON.
 * Records the failure unless the schedule is gone or has a tick at or after it; 1 when recorded.
 */
const RECORD_FAILURE = redisScript(`${UNLESS_PENDING}
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
return 1
`);

/** `<lastTickAt>:<nextRunAt>:<messageId>`, each empty when undefined. */
function encodeTicks(
  lastTickAt: number | undefined,
  nextRunAt: number | undefined,
  messageId: string | undefined,
): string {
  return `${lastTickAt ?? ''}:${nextRunAt ?? ''}:${messageId ?? ''}`;
}

function decodeTime(text: string | undefined): number | undefined {
  if (text === undefined || text === '') return undefined;
  const value = Number(text);
  return Number.isFinite(value) ? value : undefined;
}

/** A record from its two hash values, or undefined when the definition is not one `put` wrote. */
function decodeRecord(
  name: string,
  json: string | null | undefined,
  ticks: string | null | undefined,
  error: string | null | undefined,
): ScheduleRecord | undefined {
  // A value written before the message id was kept has two fields.
  const [last, next, ...rest] = (ticks ?? '').split(':');
  const messageId = rest.join(':');
  return decodeScheduleRecord(name, json, {
    lastTickAt: decodeTime(last),
    nextRunAt: decodeTime(next),
    lastMessageId: messageId === '' ? undefined : messageId,
    lastError: decodeScheduleTickError(error),
  });
}

/**
 * Keeps recurring schedules in Redis, shared by every process of an application, so a restart
 * knows the last tick any of them sent.
 *
 * @remarks
 * A hash `<prefix>:sched:schedules` holds each schedule's definition as JSON by name; a hash
 * `<prefix>:sched:ticks` holds `<lastTickAt>:<nextRunAt>:<lastMessageId>` by name, raised by one Lua
 * script so a tick is never recorded twice nor lowered; a hash `<prefix>:sched:errors` holds the
 * failure of a tick's send as JSON by name, until a later tick is recorded. Failures reject with `redis-unavailable`,
 * `redis-command-failed`, or `store-closed` after {@link RedisScheduleStore.close}.
 *
 * @example
 * ```ts
 * const bus = createBus({ scheduleStore: new RedisScheduleStore({ connection: 'redis://127.0.0.1:6379' }), ... });
 * ```
 */
export class RedisScheduleStore implements ScheduleStore {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #schedulesKey: string;
  readonly #ticksKey: string;
  readonly #errorsKey: string;
  readonly #errors: RedisErrorContext;
  #closed = false;

  /** @throws HarrierError `invalid-option` when `prefix` is empty. */
  constructor(options: RedisScheduleStoreOptions) {
    const prefix = keyPrefixOf(options.prefix, 'RedisScheduleStore');
    const keyspace = `${prefix}:sched:`;
    this.#schedulesKey = `${keyspace}schedules`;
    this.#ticksKey = `${keyspace}ticks`;
    this.#errorsKey = `${keyspace}errors`;
    this.#connection = connectionFor(options.connection);
    this.#client = this.#connection.client;
    this.#errors = { connection: this.#connection, command: 'a schedule store command', keyspace };
  }

  get(name: string): Promise<ScheduleRecord | undefined> {
    return this.#run(async () => {
      const [json, ticks, error] = await Promise.all([
        this.#client.hget(this.#schedulesKey, name),
        this.#client.hget(this.#ticksKey, name),
        this.#client.hget(this.#errorsKey, name),
      ]);
      return decodeRecord(name, json, ticks, error);
    });
  }

  list(): Promise<ScheduleRecord[]> {
    return this.#run(async () => {
      const [schedules, ticks, errors] = await Promise.all([
        this.#client.hgetall(this.#schedulesKey),
        this.#client.hgetall(this.#ticksKey),
        this.#client.hgetall(this.#errorsKey),
      ]);
      return Object.keys(schedules)
        .sort()
        .flatMap((name) => decodeRecord(name, schedules[name], ticks[name], errors[name]) ?? []);
    });
  }

  put(record: ScheduleRecord): Promise<void> {
    return this.#run(async () => {
      const multi = this.#client
        .multi()
        .hset(this.#schedulesKey, record.name, encodeScheduleDefinition(record))
        .hset(
          this.#ticksKey,
          record.name,
          encodeTicks(record.lastTickAt, record.nextRunAt, record.lastMessageId),
        );
      if (record.lastError === undefined) multi.hdel(this.#errorsKey, record.name);
      else multi.hset(this.#errorsKey, record.name, encodeScheduleTickError(record.lastError));
      await multi.exec();
    });
  }

  recordTick(
    name: string,
    tickAt: number,
    nextRunAt: number | undefined,
    messageId?: string,
  ): Promise<boolean> {
    return this.#run(async () => {
      const reply = await evalScript(
        this.#client,
        RECORD_TICK,
        [this.#schedulesKey, this.#ticksKey, this.#errorsKey],
        [name, String(tickAt), encodeTicks(tickAt, nextRunAt, messageId)],
      );
      return Number(reply) === 1;
    });
  }

  recordTickFailure(name: string, tickAt: number, error: ScheduleTickError): Promise<boolean> {
    return this.#run(async () => {
      const reply = await evalScript(
        this.#client,
        RECORD_FAILURE,
        [this.#schedulesKey, this.#ticksKey, this.#errorsKey],
        [name, String(tickAt), encodeScheduleTickError(error)],
      );
      return Number(reply) === 1;
    });
  }

  delete(name: string): Promise<boolean> {
    return this.#run(async () => {
      const replies = await this.#client
        .multi()
        .hdel(this.#schedulesKey, name)
        .hdel(this.#ticksKey, name)
        .hdel(this.#errorsKey, name)
        .exec();
      const [error, removed] = replies?.[0] ?? [null, 0];
      if (error) throw error;
      return Number(removed) === 1;
    });
  }

  /** Quits the client the store created from a URL; a client passed in is left open. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#connection.close();
  }

  async #run<T>(body: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The Redis schedule store is closed: create a new RedisScheduleStore to use schedules again',
      );
    }
    return runCommand(body, this.#errors);
  }
}
