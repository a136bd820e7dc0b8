/**
 * Everything of the PostgreSQL layer that needs pg at run time, in one module that
 * `loadPostgresLayer` imports with `import()` once it has checked that pg is installed. Import it
 * only that way (a type-only import is fine).
 */
export { migratePostgres } from './migrate-postgres.js';
export { OutboxRelay, startOutboxRelay } from './outbox-relay.js';

export {
  DEFAULT_INBOX_PRUNE_INTERVAL_MS,
  DEFAULT_INBOX_RETENTION_MS,
  postgresUnitOfWork,
} from './postgres-unit-of-work.js';
export { postgresSession } from './postgres-session.js';
export { PostgresCheckpointStore } from './postgres-checkpoint-store.js';
export { PostgresSagaStore } from './postgres-saga-store.js';
