import type { ClusterOptions } from 'ioredis';
import {
  isClusterClient,
  isRedisClient,
  type RedisClient,
  type RedisConnectionOptions,
  type RedisOptions,
} from './redis-connection.js';
import { ioredis } from './redis-peers.js';

/** What the broker sets on each client it makes: how hard commands retry, and whether they queue. */
export interface ClientSettings {
  readonly maxRetriesPerRequest: number | null;
  readonly enableOfflineQueue?: boolean;
  readonly lazyConnect?: boolean;
}

/**
 * A new ioredis client of the broker's own. Its name in `CLIENT LIST` is `<prefix>:harrier:<role>`,
 * unless the connection options set `connectionName`.
 *
 * @remarks
 * A client passed in is never used itself (the broker needs connections with its own retry settings,
 * and BullMQ blocking ones): each role gets a `duplicate()` of it, which keeps its server, password
 * and TLS settings.
 */
export function createBrokerClient(
  connection: RedisConnectionOptions,
  prefix: string,
  extra: ClientSettings,
  role: string,
): RedisClient {
  const connectionName = `${prefix}:harrier:${role}`;
  if (typeof connection === 'string') return new ioredis.Redis(connection, { connectionName, ...extra });
  if (isRedisClient(connection) || 'cluster' in connection) {
    const { enableOfflineQueue, lazyConnect, maxRetriesPerRequest } = extra;
    const withSettings = (options: ClusterOptions) => ({
      ...options,
      ...(enableOfflineQueue !== undefined ? { enableOfflineQueue } : {}),
      ...(lazyConnect !== undefined ? { lazyConnect } : {}),
      redisOptions: { connectionName, ...options.redisOptions, maxRetriesPerRequest } as RedisOptions,
    });
    if (!isRedisClient(connection)) {
      return new ioredis.Cluster([...connection.cluster], withSettings(connection.options ?? {}));
    }
    if (isClusterClient(connection)) return connection.duplicate(undefined, withSettings(connection.options));
    return connection.duplicate({
      connectionName: connection.options.connectionName ?? connectionName,
      ...extra,
    });
  }
  const options: RedisOptions = { connectionName, ...connection, ...extra };
  return new ioredis.Redis(options);
}
