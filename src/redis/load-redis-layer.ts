import type * as RedisLayerModule from './redis-layer.js';

/** The Redis layer's classes and helpers, as {@link loadRedisLayer} loads them. */
export type RedisLayer = typeof RedisLayerModule;

let loading: Promise<RedisLayer> | undefined;

/**
 * Loads the Redis layer (BullMQ broker, Redis stores, the CLI's Redis helpers) once, on first call.
 *
 * @remarks
 * bullmq and ioredis are optional peers: an app on the in-memory broker never installs them, and the
 * `harrier` CLI shows its help without them. The CLI imports this module statically and the layer
 * only here, when a command connects, so nothing loads a driver it does not use. The layer checks
 * its peers as it loads (redis-peers.ts).
 * @throws HarrierError `missing-dependency` naming `npm install bullmq ioredis` when bullmq or ioredis
 * is not installed.
 */
export function loadRedisLayer(): Promise<RedisLayer> {
  loading ??= import('./redis-layer.js');
  return loading;
}
