export { BullMqBroker, type BullMqBrokerOptions, type RedisOptions } from './bullmq-broker.js';
export { describeRedisUrl, redisUnavailable } from './redis-errors.js';
export { RedisDeadLetterStore } from './redis-dead-letter-store.js';
export type { RedisDeadLetterStoreOptions } from './redis-dead-letter-store.js';
export { RedisEventLog, type RedisEventLogOptions } from './redis-event-log.js';
export { RedisCheckpointStore, type RedisCheckpointStoreOptions } from './redis-checkpoint-store.js';
