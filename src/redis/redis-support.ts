import { createHash } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { HarrierError } from '../errors/harrier-error.js';
import { describeCluster, describeRedisUrl, redisUnavailable } from './redis-errors.js';

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
  client: Redis | Cluster,
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

/** Where a client connects, for messages (never its password). */
export function describeClient(client: Redis | Cluster): string {
  if (client instanceof Cluster) {
    // Empty until the client has connected: then 'a Redis Cluster'.
    return describeCluster(
      client.nodes().map((node) => `${node.options.host ?? 'localhost'}:${node.options.port ?? 6379}`),
    );
  }
  const { host, port, path, tls } = client.options;
  return typeof path === 'string'
    ? path
    : `${tls === undefined ? 'redis' : 'rediss'}://${host ?? 'localhost'}:${port ?? 6379}`;
}

/** Settings of a client created from a URL; a client passed in keeps its own. */
export interface OwnedClientOptions {
  /** @defaultValue 1 */
  readonly maxRetriesPerRequest?: number | null;
  /** @defaultValue 3000 */
  readonly connectTimeoutMs?: number;
}

/** The client a store talks to, and whether the store created it. */
export interface RedisConnection<C extends Redis | Cluster = Redis | Cluster> {
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
 * The connection of a store: for a URL, a client of its own whose connection errors are kept for
 * the next command's message; for a client passed in, that client untouched (no listeners added).
 */
export function connectionFor<C extends Redis | Cluster = Redis>(
  connection: string | C,
  options: OwnedClientOptions = {},
): RedisConnection<C | Redis> {
  if (typeof connection !== 'string') {
    return {
      client: connection,
      owned: false,
      // Read when a message needs it: a Cluster client learns its nodes as it connects.
      get where() {
        return describeClient(connection);
      },
      cluster: connection instanceof Cluster,
      lastError: () => undefined,
      close: () => Promise.resolve(),
    };
  }
  let lastError: Error | undefined;
  const client = new Redis(connection, {
    maxRetriesPerRequest: options.maxRetriesPerRequest === undefined ? 1 : options.maxRetriesPerRequest,
    connectTimeout: options.connectTimeoutMs ?? 3000,
  });
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
    where: describeRedisUrl(connection),
    cluster: false,
    lastError: () => lastError,
    close: () => quitClient(client),
  };
}

async function quitClient(client: Redis | Cluster): Promise<void> {
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
