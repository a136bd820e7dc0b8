import { HarrierError } from '../errors/harrier-error.js';

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

/** The error for a Redis that cannot be reached, naming the fix. */
export function redisUnavailable(where: string, cause: unknown): HarrierError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const fix = where.startsWith('the Redis Cluster')
    ? 'start the cluster, or point REDIS_CLUSTER / --redis-cluster at some of its running nodes'
    : 'start Redis there, or point REDIS_URL / --redis-url at a running server';
  return new HarrierError('redis-unavailable', `Redis could not be reached at ${where} (${reason}): ${fix}`, {
    cause,
  });
}
