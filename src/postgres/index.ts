/**
 * The `harrier/postgres` entry point: the outbox and its relay, the inbox, and the checkpoint and
 * saga stores on PostgreSQL, in the application's own database.
 *
 * @remarks
 * pg is an optional peer dependency. Values that need it come through `layer` below (loaded with
 * `import()` after checking pg is installed), so an app without it gets HarrierError
 * `missing-dependency` naming `npm install pg`; never `export { … } from` a module that imports pg.
 * Because of the top-level await, `require('harrier/postgres')` is not supported; use `import`.
 */
import { loadPostgresLayer } from './load-postgres-layer.js';

export type { PostgresConnectionOptions } from './postgres-connection.js';
export { describePostgres, describePostgresUrl } from './postgres-connection.js';
export type { MigratePostgresOptions, MigrationReport } from './migrate-postgres.js';
export { DEFAULT_POSTGRES_SCHEMA } from './postgres-schema.js';
export { SCHEMA_VERSION } from './migrations.js';

const layer = await loadPostgresLayer();

/** Creates or upgrades Harrier's tables in a schema (see migrate-postgres.ts). */
export const migratePostgres = layer.migratePostgres;

export type { OutboxPublisher, OutboxRelay, OutboxRelayOptions, OutboxRelayStats } from './outbox-relay.js';
export {
  PostgresOutbox,
  type OutboxMessagePreparer,
  type OutboxSendOptions,
  type PostgresOutboxOptions,
} from './postgres-outbox.js';
export { OUTBOX_LANES, outboxChannel } from './outbox-rows.js';

/** Starts an outbox relay that publishes committed outbox rows (see outbox-relay.ts). */
export const startOutboxRelay = layer.startOutboxRelay;

export type { PostgresUnitOfWork, PostgresUnitOfWorkOptions } from './postgres-unit-of-work.js';
export type { PostgresCheckpointStoreOptions } from './postgres-checkpoint-store.js';

/**
 * Runs command handlers, event handlers and projections in a PostgreSQL transaction with the inbox,
 * the outbox and the projection checkpoint (see postgres-unit-of-work.ts and
 * docs/postgres-unit-of-work.md).
 */
export const postgresUnitOfWork = layer.postgresUnitOfWork;

/**
 * The client of the PostgreSQL transaction a handler call runs in under `postgresUnitOfWork`
 * (see postgres-session.ts).
 */
export const postgresSession = layer.postgresSession;

/** Default `inboxRetentionMs` of `postgresUnitOfWork`: 7 days. */
export const DEFAULT_INBOX_RETENTION_MS = layer.DEFAULT_INBOX_RETENTION_MS;
/** Default `inboxPruneIntervalMs` of `postgresUnitOfWork`: 1 hour. */
export const DEFAULT_INBOX_PRUNE_INTERVAL_MS = layer.DEFAULT_INBOX_PRUNE_INTERVAL_MS;

/** Projection checkpoints in PostgreSQL, committed with a projection's writes by the unit of work. */
export const PostgresCheckpointStore = layer.PostgresCheckpointStore;
/** An instance of {@link PostgresCheckpointStore}. */
export type PostgresCheckpointStore = InstanceType<typeof layer.PostgresCheckpointStore>;

export type { PostgresSagaStoreOptions } from './postgres-saga-store.js';
/** Keeps saga instances in PostgreSQL (see postgres-saga-store.ts). */
export const PostgresSagaStore = layer.PostgresSagaStore;
/** An instance of {@link PostgresSagaStore}. */
export type PostgresSagaStore = InstanceType<typeof layer.PostgresSagaStore>;
