/**
 * The `harrier/redis` entry point: the broker and stores on Redis.
 *
 * @remarks
 * bullmq and ioredis are optional peer dependencies, required synchronously by redis-peers.ts when
 * this module loads: an app without them gets a HarrierError `missing-dependency` that says
 * `npm install bullmq ioredis` (from `import` and from `require` alike), not Node's
 * ERR_MODULE_NOT_FOUND. Keep it so: no module of src/redis imports a value from bullmq or ioredis
 * other than through redis-peers.ts, and no top-level `await`, so `require('harrier/redis')` works.
 */
// First: without bullmq or ioredis, loading stops here with the error that names the install.
import './redis-peers.js';

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
export type { RedisDeliveryLedgerOptions } from './redis-delivery-ledger.js';
export type { RedisEventLogOptions } from './redis-event-log.js';
export type { RedisSagaStoreOptions } from './redis-saga-store.js';
export type { RedisScheduleStoreOptions } from './redis-schedule-store.js';
export { describeConnection, describeRedisUrl } from './redis-connection.js';
export { redisUnavailable } from './redis-errors.js';

export { BullMqBroker } from './bullmq-broker.js';
export { RedisDeadLetterStore } from './redis-dead-letter-store.js';
export { RedisDeliveryLedger } from './redis-delivery-ledger.js';
export { RedisEventLog } from './redis-event-log.js';
export { RedisCheckpointStore } from './redis-checkpoint-store.js';
export { RedisSagaStore } from './redis-saga-store.js';
export { RedisScheduleStore } from './redis-schedule-store.js';
export { openRedisAdmin, type RedisAdmin } from './redis-admin.js';
