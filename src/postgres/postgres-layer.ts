/**
 * Everything of the PostgreSQL layer that needs pg at run time, in one module that
 * `loadPostgresLayer` imports with `import()` when the CLI first needs it. Import it only that way
 * (a type-only import is fine): a static import would load pg with the importing module.
 */
export { migratePostgres } from './migrate-postgres.js';
export { OutboxRelay, startOutboxRelay } from './outbox-relay.js';
export { PostgresOutboxAdmin } from './postgres-outbox-admin.js';

export {
  DEFAULT_INBOX_PRUNE_INTERVAL_MS,
  DEFAULT_INBOX_RETENTION_MS,
  postgresUnitOfWork,
} from './postgres-unit-of-work.js';
export { postgresSession } from './postgres-session.js';
export { PostgresCheckpointStore } from './postgres-checkpoint-store.js';
export { PostgresSagaStore } from './postgres-saga-store.js';
export { PostgresDeadLetterStore } from './dead-letters/postgres-dead-letter-store.js';
export { openPostgresAdmin, PostgresAdmin } from './postgres-admin.js';
