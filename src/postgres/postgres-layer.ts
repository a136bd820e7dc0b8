/**
 * Everything of the PostgreSQL layer that needs pg at run time, in one module that
 * `loadPostgresLayer` imports with `import()` once it has checked that pg is installed. Import it
 * only that way (a type-only import is fine).
 */
export { migratePostgres } from './migrate-postgres.js';
export { OutboxRelay, startOutboxRelay } from './outbox-relay.js';
