import {
  Cluster,
  Redis,
  type ClusterNode,
  type ClusterOptions,
  type RedisOptions as IoRedisOptions,
} from 'ioredis';
import { describeCluster, describeRedisUrl } from './redis-errors.js';

/** ioredis connection options (ioredis's own type, less `replyMapping`, which clashes with exactOptionalPropertyTypes). */
export type RedisOptions = Omit<IoRedisOptions, 'replyMapping'>;

/** A Redis Cluster to connect to: some of its nodes (the rest are discovered) and ioredis cluster options. */
export interface RedisClusterConnection {
  /** Seed nodes, e.g. `[{ host: '10.0.0.1', port: 7000 }]` or `['redis://10.0.0.1:7000']`. */
  readonly cluster: readonly ClusterNode[];
  /** ioredis `Cluster` options; `redisOptions` applies to every node connection. */
  readonly options?: ClusterOptions;
}

/** Where the broker connects: a `redis://` URL, ioredis options, or a Redis Cluster. */
export type BrokerConnection = string | RedisOptions | RedisClusterConnection;

/** What the broker sets on each client it makes: how hard commands retry, and whether they queue. */
export interface ClientSettings {
  readonly maxRetriesPerRequest: number | null;
  readonly enableOfflineQueue?: boolean;
  readonly lazyConnect?: boolean;
}

/** True when `connection` names a Redis Cluster. */
export function isClusterConnection(connection: unknown): connection is RedisClusterConnection {
  return typeof connection === 'object' && connection !== null && 'cluster' in connection;
}

/**
 * A new ioredis client. Its name in `CLIENT LIST` is `<prefix>:harrier:<role>`, unless the
 * connection options set `connectionName`.
 */
export function createBrokerClient(
  connection: BrokerConnection,
  prefix: string,
  extra: ClientSettings,
  role: string,
): Redis | Cluster {
  const connectionName = `${prefix}:harrier:${role}`;
  if (typeof connection === 'string') return new Redis(connection, { connectionName, ...extra });
  if (isClusterConnection(connection)) {
    const { enableOfflineQueue, lazyConnect, maxRetriesPerRequest } = extra;
    const options = connection.options ?? {};
    return new Cluster([...connection.cluster], {
      ...options,
      ...(enableOfflineQueue !== undefined ? { enableOfflineQueue } : {}),
      ...(lazyConnect !== undefined ? { lazyConnect } : {}),
      redisOptions: { connectionName, ...options.redisOptions, maxRetriesPerRequest } as RedisOptions,
    });
  }
  const options: RedisOptions = { connectionName, ...connection, ...extra };
  return new Redis(options);
}

/** Where a connection points, for messages (never its password). */
export function describeBrokerConnection(connection: BrokerConnection): string {
  if (typeof connection === 'string') return describeRedisUrl(connection);
  if (isClusterConnection(connection)) {
    return describeCluster(
      connection.cluster.map((node) =>
        typeof node === 'string'
          ? node.includes('://')
            ? describeRedisUrl(node)
            : node
          : typeof node === 'number'
            ? `127.0.0.1:${node}`
            : `${node.host ?? '127.0.0.1'}:${node.port ?? 6379}`,
      ),
    );
  }
  return `${connection.host ?? '127.0.0.1'}:${connection.port ?? 6379}`;
}
