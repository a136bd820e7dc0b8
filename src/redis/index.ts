/**
 * The `harrier/redis` entry point: the broker and stores on Redis.
 *
 * @remarks
 * bullmq and ioredis are optional peer dependencies. This module loads the classes that use them
 * with `import()` (top-level await) after checking that both are installed, so an app without them
 * gets a HarrierError `missing-dependency` that says `npm install bullmq ioredis`, not Node's
 * ERR_MODULE_NOT_FOUND at link time. Keep it so: export a value from a module that imports bullmq or
 * ioredis through `layer` below, never with `export { … } from`; types can be re-exported as usual.
 * Because of the top-level await, `require('harrier/redis')` is not supported; use `import`.
 */
import type { BullMqBroker as BullMqBrokerClass } from './bullmq-broker.js';
import { loadRedisLayer } from './load-redis-layer.js';
import type { RedisAdmin as RedisAdminClass } from './redis-admin.js';
import type { RedisCheckpointStore as RedisCheckpointStoreClass } from './redis-checkpoint-store.js';
import type { RedisDeadLetterStore as RedisDeadLetterStoreClass } from './redis-dead-letter-store.js';
import type { RedisEventLog as RedisEventLogClass } from './redis-event-log.js';
import type { RedisSagaStore as RedisSagaStoreClass } from './redis-saga-store.js';

export type { BullMqBrokerOptions } from './bullmq-broker.js';
export type { RedisAdminOptions } from './redis-admin.js';
export type {
  RedisClient,
  RedisClusterConnection,
  RedisConnectionOptions,
  RedisOptions,
} from './redis-connection.js';
export type { RedisCheckpointStoreOptions } from './redis-checkpoint-store.js';
export type { RedisDeadLetterStoreOptions } from './redis-dead-letter-store.js';
export type { RedisEventLogOptions } from './redis-event-log.js';
export type { RedisSagaStoreOptions } from './redis-saga-store.js';
export { describeConnection, describeRedisUrl } from './redis-connection.js';
export { redisUnavailable } from './redis-errors.js';

const layer = await loadRedisLayer();

/** The production broker: BullMQ queues on Redis (see bullmq-broker.ts). */
export const BullMqBroker = layer.BullMqBroker;
/** The production broker: BullMQ queues on Redis (see bullmq-broker.ts). */
export type BullMqBroker = BullMqBrokerClass;

/** A DeadLetterStore on Redis (see redis-dead-letter-store.ts). */
export const RedisDeadLetterStore = layer.RedisDeadLetterStore;
/** A DeadLetterStore on Redis (see redis-dead-letter-store.ts). */
export type RedisDeadLetterStore = RedisDeadLetterStoreClass;

/** An EventLog on Redis Streams (see redis-event-log.ts). */
export const RedisEventLog = layer.RedisEventLog;
/** An EventLog on Redis Streams (see redis-event-log.ts). */
export type RedisEventLog = RedisEventLogClass;

/** A CheckpointStore on Redis (see redis-checkpoint-store.ts). */
export const RedisCheckpointStore = layer.RedisCheckpointStore;
/** A CheckpointStore on Redis (see redis-checkpoint-store.ts). */
export type RedisCheckpointStore = RedisCheckpointStoreClass;

/** A SagaStore on Redis (see redis-saga-store.ts). */
export const RedisSagaStore = layer.RedisSagaStore;
/** A SagaStore on Redis (see redis-saga-store.ts). */
export type RedisSagaStore = RedisSagaStoreClass;

/** Opens the queries and parts a tool needs on a Harrier system (see redis-admin.ts). */
export const openRedisAdmin = layer.openRedisAdmin;
/** The queries and parts a tool needs on a Harrier system (see redis-admin.ts). */
export type RedisAdmin = RedisAdminClass;
