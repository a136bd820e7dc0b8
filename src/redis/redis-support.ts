import { createHash } from 'node:crypto';
import { HarrierError } from '../errors/harrier-error.js';
import {
  describeConnection,
  isClusterConnection,
  isRedisClient,
  type RedisClient,
  type RedisConnectionOptions,
  type RedisOptions,
} from './redis-connection.js';
import { redisUnavailable } from './redis-errors.js';
import { ioredis } from './redis-peers.js';

/** A Lua script with its SHA1, for EVALSHA. */
export interface RedisScript {
  readonly lua: string;
  readonly sha: string;
}

export function redisScript(lua: string): RedisScript {
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

/** An error Redis itself replied with, as opposed to a connection that failed. */
export function isReplyError(error: unknown): error is Error {
  return error instanceof Error && error.name === 'ReplyError';
}

/** Runs a script by its SHA, loading it on the first NOSCRIPT (a new or flushed server). */
export async function evalScript(
  client: RedisClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly string[],
): Promise<unknown> {
  try {
    return await client.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (error) {
    if (!isReplyError(error) || !error.message.startsWith('NOSCRIPT')) throw error;
    return await client.eval(script.lua, keys.length, ...keys, ...args);
  }
}

/** Settings of a client a part creates for itself; a client passed in keeps its own. */
export interface OwnedClientOptions {
  /** @defaultValue 1 */
  readonly maxRetriesPerRequest?: number | null;
  /** @defaultValue 3000 */
  readonly connectTimeoutMs?: number;
  /**
   * Reconnect attempts after a connection is lost or refused, before the client gives up for good;
   * a tool sets a few so that a Redis that is down is reported instead of waited for.
   * @defaultValue unbounded (the client keeps reconnecting in the background)
   */
  readonly reconnectAttempts?: number;
  /** @defaultValue false */
  readonly lazyConnect?: boolean;
}

/** The client a store talks to, and whether the store created it. */
export interface RedisConnection<C extends RedisClient = RedisClient> {
  readonly client: C;
  /** True when the client was created from a URL, so the store quits it on close. */
  readonly owned: boolean;
  /** Where Redis is, for messages. */
  readonly where: string;
  /** True for a Redis Cluster (its unreachable error names REDIS_CLUSTER). */
  readonly cluster: boolean;
  /** Why the owned client last failed to connect; names the real cause instead of "max retries". */
  lastError(): Error | undefined;
  /** Quits an owned client (a client passed in is left open); harmless on a client that is down. */
  close(): Promise<void>;
}

/**
 * A new ioredis client for `connection` (a URL, cluster seed nodes or ioredis options), with
 * `settings` under the options the caller gave: those win.
 */
export function createClient(
  connection: Exclude<RedisConnectionOptions, RedisClient>,
  settings: OwnedClientOptions = {},
): RedisClient {
  const retryStrategy =
    settings.reconnectAttempts === undefined
      ? undefined
      : (times: number): number | null => (times > (settings.reconnectAttempts ?? 0) ? null : 100);
  const node: RedisOptions = {
    maxRetriesPerRequest: settings.maxRetriesPerRequest === undefined ? 1 : settings.maxRetriesPerRequest,
    connectTimeout: settings.connectTimeoutMs ?? 3000,
  };
  const lazy = settings.lazyConnect === true ? { lazyConnect: true } : {};
  if (typeof connection === 'string') {
    return new ioredis.Redis(connection, { ...node, ...lazy, ...(retryStrategy ? { retryStrategy } : {}) });
  }
  if ('cluster' in connection) {
    const options = connection.options ?? {};
    return new ioredis.Cluster([...connection.cluster], {
      ...lazy,
      ...(retryStrategy ? { clusterRetryStrategy: retryStrategy } : {}),
      ...options,
      redisOptions: { ...node, ...options.redisOptions } as RedisOptions,
    });
  }
  return new ioredis.Redis({ ...node, ...lazy, ...(retryStrategy ? { retryStrategy } : {}), ...connection });
}

/**
 * The connection of a store: for a URL, seed nodes or options, a client of its own whose connection
 * errors are kept for the next command's message; for a client passed in, that client untouched (no
 * listeners added).
 */
export function connectionFor(
  connection: RedisConnectionOptions,
  options: OwnedClientOptions = {},
): RedisConnection {
  if (isRedisClient(connection)) {
    return {
      client: connection,
      owned: false,
      // Read when a message needs it: a Cluster client learns its nodes as it connects.
      get where() {
        return describeConnection(connection);
      },
      cluster: connection.isCluster,
      lastError: () => undefined,
      close: () => Promise.resolve(),
    };
  }
  let lastError: Error | undefined;
  const client = createClient(connection, options);
  // Without a listener ioredis prints every failed reconnect; the cause is reported on the next
  // command instead.
  client.on('error', (error: Error) => {
    lastError = error;
  });
  client.on('ready', () => {
    lastError = undefined;
  });
  return {
    client,
    owned: true,
    where: describeConnection(connection),
    cluster: isClusterConnection(connection),
    lastError: () => lastError,
    close: () => quitClient(client),
  };
}

/** Quits `client`, or drops it when it is not connected; never throws. */
export async function quitClient(client: RedisClient): Promise<void> {
  if (client.status !== 'ready') {
    // QUIT would wait in the offline queue for a connection that may never come.
    client.disconnect();
    return;
  }
  try {
    await client.quit();
  } catch {
    client.disconnect();
  }
}

/** What a failed command's message says about the store that sent it. */
export interface RedisErrorContext {
  readonly connection: RedisConnection;
  /** The command's kind, with its article: 'a checkpoint store command'. */
  readonly command: string;
  /** Start of every key of the store, named as what else might write there. */
  readonly keyspace: string;
  /** A further check for the reader, between the server's log and the keyspace. */
  readonly check?: string;
}

/**
 * A Redis failure as a {@link HarrierError}: `redis-command-failed` when Redis refused the command,
 * `redis-unavailable` when it could not be reached. HarrierErrors pass through unchanged.
 */
export function translateRedisError(error: unknown, context: RedisErrorContext): unknown {
  if (HarrierError.is(error)) return error;
  const { connection } = context;
  if (isReplyError(error)) {
    const checks = context.check === undefined ? ' and' : `, ${context.check}, and`;
    return new HarrierError(
      'redis-command-failed',
      `Redis at ${connection.where} refused ${context.command} (${error.message}): check the server's log${checks} that nothing else writes under "${context.keyspace}"`,
      { cause: error },
    );
  }
  // The client's last connection error says why (refused, DNS, timeout); the command's own error
  // usually only says that it gave up.
  return redisUnavailable(connection.where, connection.lastError() ?? error, connection.cluster);
}

/** Runs `body`, turning Redis's failures into {@link HarrierError}s. */
export async function runCommand<T>(body: () => Promise<T>, context: RedisErrorContext): Promise<T> {
  try {
    return await body();
  } catch (error) {
    throw translateRedisError(error, context);
  }
}

/**
 * The key prefix a store was given, or the default hash tag.
 * @throws HarrierError `invalid-option` when it is empty.
 */
export function keyPrefixOf(prefix: string | undefined, owner: string): string {
  const chosen = prefix ?? '{harrier}';
  if (chosen === '') {
    throw new HarrierError(
      'invalid-option',
      `${owner} prefix must not be empty: pass a hash tag such as '{harrier}', or leave it out for the default`,
    );
  }
  return chosen;
}
