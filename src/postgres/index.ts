/**
 * The `harrier/postgres` entry point: the outbox and its relay, the inbox, the checkpoint, saga and
 * dead-letter stores on PostgreSQL, in the application's own database, and the admin tools open.
 *
 * @remarks
 * pg is an optional peer dependency, required synchronously by postgres-peers.ts when this module
 * loads: an app without it gets HarrierError `missing-dependency` naming `npm install pg` (from
 * `import` and from `require` alike). Keep it so: no module of src/postgres imports a value from pg
 * other than through postgres-peers.ts, and no top-level `await`, so `require('harrier/postgres')`
 * works.
 */
// First: without pg, loading stops here with the error that names `npm install pg`.
import './postgres-peers.js';

export type { PostgresConnectionOptions } from './postgres-connection.js';
export { describePostgres, describePostgresUrl } from './postgres-connection.js';
export type { MigratePostgresOptions, MigrationReport } from './migrate-postgres.js';
export { DEFAULT_POSTGRES_SCHEMA } from './postgres-schema.js';
export { SCHEMA_VERSION } from './migrations.js';
export { migratePostgres } from './migrate-postgres.js';

export type { OutboxPublisher, OutboxRelay, OutboxRelayOptions, OutboxRelayStats } from './outbox-relay.js';
export {
  PostgresOutbox,
  type OutboxMessagePreparer,
  type OutboxSendOptions,
  type PostgresOutboxOptions,
} from './postgres-outbox.js';
export { OUTBOX_LANES, outboxChannel } from './outbox-rows.js';
export { startOutboxRelay } from './outbox-relay.js';
export type { PostgresOutboxAdminOptions } from './postgres-outbox-admin.js';
export { PostgresOutboxAdmin } from './postgres-outbox-admin.js';

export type { PostgresUnitOfWork, PostgresUnitOfWorkOptions } from './postgres-unit-of-work.js';
export {
  DEFAULT_INBOX_PRUNE_INTERVAL_MS,
  DEFAULT_INBOX_RETENTION_MS,
  postgresUnitOfWork,
} from './postgres-unit-of-work.js';
export { postgresSession } from './postgres-session.js';

export type { PostgresCheckpointStoreOptions } from './postgres-checkpoint-store.js';
export { PostgresCheckpointStore } from './postgres-checkpoint-store.js';
export type { PostgresScheduleStoreOptions } from './postgres-schedule-store.js';
export { PostgresScheduleStore } from './postgres-schedule-store.js';
export type { PostgresDeliveryLedgerOptions } from './postgres-delivery-ledger.js';
export { LEDGER_PRUNE_BATCH, PostgresDeliveryLedger } from './postgres-delivery-ledger.js';
export type { PostgresSagaStoreOptions } from './postgres-saga-store.js';
export { PostgresSagaStore } from './postgres-saga-store.js';

export type { PostgresBrokerOptions } from './broker/postgres-broker.js';
export { PostgresBroker } from './broker/postgres-broker.js';

export type { PostgresDeadLetterStoreOptions } from './dead-letters/postgres-dead-letter-store.js';
export { PostgresDeadLetterStore } from './dead-letters/postgres-dead-letter-store.js';
export type { PostgresAdminOptions } from './postgres-admin.js';
export { openPostgresAdmin, PostgresAdmin } from './postgres-admin.js';
