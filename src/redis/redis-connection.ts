/**
 * Where Redis is, as every part of the Redis layer takes it, and how a connection is named in
 * messages. Types only from ioredis: this module loads without bullmq and ioredis installed.
 */
import type { Cluster, ClusterNode, ClusterOptions, Redis, RedisOptions as IoRedisOptions } from 'ioredis';

/** ioredis connection options (ioredis's own type, less `replyMapping`, which clashes with exactOptionalPropertyTypes). */
export type RedisOptions = Omit<IoRedisOptions, 'replyMapping'>;

/** An ioredis client: a single server's `Redis`, or a `Cluster`. */
export type RedisClient = Redis | Cluster;

/** A Redis Cluster to connect to: some of its nodes (the rest are discovered) and ioredis cluster options. */
export interface RedisClusterConnection {
  /** Seed nodes, e.g. `[{ host: '10.0.0.1', port: 7000 }]` or `['redis://10.0.0.1:7000']`. */
  readonly cluster: readonly ClusterNode[];
  /**
   * ioredis `Cluster` options; `redisOptions` applies to every node connection.
   * @defaultValue none (ioredis's defaults, with Harrier's retry settings for the client's role)
   */
  readonly options?: ClusterOptions;
}

/**
 * Where Redis is, for the broker, the event log, the checkpoint and dead-letter stores, and the
 * tools' {@link RedisAdmin}: the one connection type of the Redis layer.
 *
 * - a `redis://` or `rediss://` URL (or a Unix socket path): the part creates a client of its own and
 *   quits it on close;
 * - an ioredis client (`Redis`, or `Cluster` for Redis Cluster) to share: the part never quits it
 *   (the broker, which needs connections of its own, duplicates it);
 * - `{ cluster: nodes, options? }`: seed nodes of a Redis Cluster; the part creates its own `Cluster`;
 * - ioredis options (`{ host, port, password, tls, ... }`): the part creates its own client.
 *
 * Every key carries the prefix's hash tag, so on a cluster each part's keys share one slot.
 */
export type RedisConnectionOptions = string | RedisClient | RedisClusterConnection | RedisOptions;

/** True when `connection` is an ioredis client (rather than where to create one). */
export function isRedisClient(connection: RedisConnectionOptions): connection is RedisClient {
  // Both ioredis classes carry a boolean `isCluster`; checked by shape so that this module needs no
  // ioredis at run time.
  return (
    typeof connection === 'object' && typeof (connection as { isCluster?: unknown }).isCluster === 'boolean'
  );
}

/**
 * True when `client` is an ioredis `Cluster`.
 *
 * @remarks
 * Read from `isCluster`, not `instanceof Cluster`: a client made by another copy of ioredis (the
 * application's, next to the one bullmq depends on) is no instance of this copy's class.
 */
export function isClusterClient(client: RedisClient): client is Cluster {
  return client.isCluster;
}

/** True when `connection` is a Redis Cluster: seed nodes or a `Cluster` client. */
export function isClusterConnection(
  connection: RedisConnectionOptions,
): connection is RedisClusterConnection | Cluster {
  if (typeof connection === 'string') return false;
  if (isRedisClient(connection)) return connection.isCluster;
  return 'cluster' in connection;
}

/** A redis:// URL with its password hidden, for messages. */
export function describeRedisUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'an unparsable Redis URL';
  }
}

/** A seed node, for messages. */
function describeNode(node: ClusterNode): string {
  if (typeof node === 'string') return node.includes('://') ? describeRedisUrl(node) : node;
  if (typeof node === 'number') return `127.0.0.1:${node}`;
  return `${node.host ?? '127.0.0.1'}:${node.port ?? 6379}`;
}

/** A Redis Cluster by some of its nodes, for messages. */
function describeCluster(nodes: readonly string[]): string {
  return nodes.length === 0 ? 'a Redis Cluster' : `the Redis Cluster at ${nodes.join(', ')}`;
}

/**
 * Where `connection` points, for messages: a URL with its password masked, `host:port`, a socket
 * path, or the Redis Cluster by its nodes. Never a password.
 *
 * @remarks
 * A `Cluster` client knows its nodes only once it has connected; before that it reads 'a Redis Cluster'.
 */
export function describeConnection(connection: RedisConnectionOptions): string {
  if (typeof connection === 'string') {
    return connection.startsWith('/') ? connection : describeRedisUrl(connection);
  }
  if (isRedisClient(connection)) {
    if (connection.isCluster) {
      return describeCluster(
        (connection as Cluster)
          .nodes()
          .map((node) => `${node.options.host ?? 'localhost'}:${node.options.port ?? 6379}`),
      );
    }
    const { host, port, path, tls } = (connection as Redis).options;
    return typeof path === 'string'
      ? path
      : `${tls === undefined ? 'redis' : 'rediss'}://${host ?? 'localhost'}:${port ?? 6379}`;
  }
  if ('cluster' in connection) return describeCluster(connection.cluster.map(describeNode));
  if (typeof connection.path === 'string') return connection.path;
  return `${connection.host ?? '127.0.0.1'}:${connection.port ?? 6379}`;
}
