/**
 * Everything of the Redis layer that needs bullmq or ioredis at run time, in one module that
 * `loadRedisLayer` (load-redis-layer.ts) imports with `import()` once it has checked that both are installed.
 *
 * @remarks
 * Import this module only through `loadRedisLayer` (a type-only import is fine): a static import
 * would make bullmq and ioredis load when the importing module links, and a missing one would fail
 * there with ERR_MODULE_NOT_FOUND instead of the error that names `npm install bullmq ioredis`.
 */
export { BullMqBroker } from './bullmq-broker.js';
export { RedisCheckpointStore } from './redis-checkpoint-store.js';
export { RedisDeadLetterStore } from './redis-dead-letter-store.js';
export { RedisEventLog } from './redis-event-log.js';
export { RedisSagaStore } from './redis-saga-store.js';
export { openRedisAdmin } from './redis-admin.js';
