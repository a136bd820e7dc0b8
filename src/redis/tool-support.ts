import { Queue, type JobType } from 'bullmq';
import { Cluster, Redis } from 'ioredis';

/** Where a tool connects: a server by URL, or a Redis Cluster by some of its nodes. */
export type ToolTarget =
  | { readonly url: string }
  | { readonly cluster: readonly { readonly host: string; readonly port: number }[] };

/**
 * A client for a command-line tool, not yet connected: it gives up after a few quick retries, so a
 * Redis that is down is reported instead of waited for.
 */
export function createToolClient(target: ToolTarget): Redis | Cluster {
  return 'url' in target
    ? new Redis(target.url, {
        lazyConnect: true,
        maxRetriesPerRequest: 1,
        connectTimeout: 3000,
        retryStrategy: (times) => (times > 2 ? null : 100),
      })
    : new Cluster([...target.cluster], {
        lazyConnect: true,
        clusterRetryStrategy: (times) => (times > 2 ? null : 100),
        redisOptions: { maxRetriesPerRequest: 1, connectTimeout: 3000 },
      });
}

/** True when `client` is a Redis Cluster client. */
export function isCluster(client: Redis | Cluster): client is Cluster {
  return client instanceof Cluster;
}

/** How many jobs one BullMQ queue holds in each of `states`, read on `client`. */
export async function queueJobCounts<S extends JobType>(
  client: Redis | Cluster,
  prefix: string,
  name: string,
  states: readonly S[],
): Promise<Record<S, number>> {
  const queue = new Queue(name, { connection: client, prefix });
  try {
    const counts = await queue.getJobCounts(...states);
    return Object.fromEntries(states.map((state) => [state, counts[state] ?? 0])) as Record<S, number>;
  } finally {
    await queue.close();
  }
}
