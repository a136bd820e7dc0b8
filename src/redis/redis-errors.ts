import { HarrierError } from '../errors/harrier-error.js';

/**
 * The error for a Redis that cannot be reached, naming the fix.
 * @param cluster - true when `where` is a Redis Cluster, so the fix names REDIS_CLUSTER.
 */
export function redisUnavailable(where: string, cause: unknown, cluster = false): HarrierError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const fix = cluster
    ? 'start the cluster, or point REDIS_CLUSTER / --redis-cluster at some of its running nodes'
    : 'start Redis there, or point REDIS_URL / --redis-url at a running server';
  return new HarrierError('redis-unavailable', `Redis could not be reached at ${where} (${reason}): ${fix}`, {
    cause,
  });
}
