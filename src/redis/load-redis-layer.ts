import { HarrierError } from '../errors/harrier-error.js';
import type * as RedisLayerModule from './redis-layer.js';

/** The Redis layer's classes and helpers, as {@link loadRedisLayer} loads them. */
export type RedisLayer = typeof RedisLayerModule;

/** What to run when a peer of the Redis layer is missing. */
const INSTALL_REDIS_PEERS = 'npm install bullmq ioredis';

let loading: Promise<RedisLayer> | undefined;

/** True when `error` says that the package `name` itself (not one of its dependencies) is not installed. */
function isMissing(error: unknown, name: string): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    error instanceof Error &&
    error.message.includes(`'${name}'`)
  );
}

async function load(): Promise<RedisLayer> {
  const missing: string[] = [];
  // One at a time, so that the error names each missing package, not only the first.
  try {
    await import('bullmq');
  } catch (error) {
    if (!isMissing(error, 'bullmq')) throw error;
    missing.push('bullmq');
  }
  try {
    await import('ioredis');
  } catch (error) {
    if (!isMissing(error, 'ioredis')) throw error;
    missing.push('ioredis');
  }
  if (missing.length > 0) {
    throw new HarrierError(
      'missing-dependency',
      `Harrier's Redis layer (harrier/redis and the Redis commands of the harrier CLI) needs bullmq and ioredis, and ${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not installed: ${INSTALL_REDIS_PEERS}`,
    );
  }
  return await import('./redis-layer.js');
}

/**
 * Loads the Redis layer (BullMQ broker, Redis stores, the CLI's Redis helpers) once, after checking
 * that its optional peer dependencies are installed.
 *
 * @remarks
 * bullmq and ioredis are optional peers: an app on the in-memory broker never installs them, and the
 * `harrier` CLI shows its help without them. Loading the layer with `import()` instead of static
 * imports turns a missing peer into an error that says what to install, instead of Node's
 * ERR_MODULE_NOT_FOUND at link time.
 * @throws HarrierError `missing-dependency` naming `npm install bullmq ioredis` when bullmq or ioredis
 * is not installed.
 */
export function loadRedisLayer(): Promise<RedisLayer> {
  loading ??= load();
  return loading;
}
