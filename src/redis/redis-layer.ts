/**
 * Everything of the Redis layer that needs bullmq or ioredis at run time, in one module that
 * `loadRedisLayer` (load-redis-layer.ts) imports with `import()` when the CLI first needs it.
 *
 * @remarks
 * Import this module only through `loadRedisLayer` (a type-only import is fine): a static import
 * would load bullmq and ioredis with the importing module, so the CLI would need them for `--help`.
 */
export { BullMqBroker } from './bullmq-broker.js';
export { RedisCheckpointStore } from './redis-checkpoint-store.js';
export { RedisDeadLetterStore } from './redis-dead-letter-store.js';
export { RedisEventLog } from './redis-event-log.js';
export { RedisSagaStore } from './redis-saga-store.js';
export { openRedisAdmin } from './redis-admin.js';
