export {
  PostgresDeadLetterStore,
  type PostgresDeadLetterStoreOptions,
} from './postgres-dead-letter-store.js';
