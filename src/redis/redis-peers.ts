/**
 * bullmq and ioredis, the Redis layer's drivers: every module of src/redis takes their values
 * (`bullmq.Queue`, `ioredis.Redis`, ...) from here, and their types from `import type`.
 *
 * @remarks
 * They are optional peers, required (their CommonJS builds) when this module is evaluated:
 * synchronously, so `harrier/redis` loads under `import` and under `require(esm)` alike, and a
 * missing one fails the load with HarrierError `missing-dependency` saying
 * `npm install bullmq ioredis` instead of Node's ERR_MODULE_NOT_FOUND. One way for every module, so
 * the layer never holds two copies of a driver: under Node, `import 'bullmq'` and `import 'ioredis'`
 * resolve to these same CommonJS builds (bullmq's ESM build is named only by its `module` field,
 * which bundlers read and Node does not; ioredis ships CommonJS only), so an app's own ioredis
 * client or BullMQ queue is the same class as Harrier's.
 */
import { createRequire } from 'node:module';
import type * as BullMq from 'bullmq';
import type * as IoRedis from 'ioredis';
import { requirePeers } from '../errors/require-peers.js';

const [bullmqModule, ioredisModule] = requirePeers(
  createRequire(import.meta.url),
  ['bullmq', 'ioredis'],
  "Harrier's Redis layer (harrier/redis and the Redis commands of the harrier CLI)",
);

/** The bullmq module. */
export const bullmq = bullmqModule as typeof BullMq;
/** The ioredis module. */
export const ioredis = ioredisModule as typeof IoRedis;
