import type pg from 'pg';
import type { SystemAdmin } from '../admin/system-admin.js';
import type { Topology } from '../admin/topology.js';
import type { AdminBrokerOptions } from '../admin/transport-admin.js';
import type { MessageBroker } from '../broker/message-broker.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { CheckpointLag } from '../projections/projection-lag.js';
import { PostgresBroker } from './broker/postgres-broker.js';
import { PostgresDeadLetterStore } from './dead-letters/postgres-dead-letter-store.js';
import { PostgresDeliveryLedger } from './postgres-delivery-ledger.js';
import { PostgresOutboxAdmin } from './postgres-outbox-admin.js';
import { isPool, type PostgresConnectionOptions } from './postgres-connection.js';
import { PostgresCheckpointStore } from './postgres-checkpoint-store.js';
import { openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { PostgresSagaStore } from './postgres-saga-store.js';
import { PostgresScheduleStore } from './postgres-schedule-store.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';
import { postgresTopology } from './postgres-topology.js';

/** Options of {@link openPostgresAdmin}. */
export interface PostgresAdminOptions {
  /**
   * The schema of the Harrier system to look at: the `schema` its PostgreSQL parts were given.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * For a pool the admin creates from a URL or options: how long connecting may take before the
   * server counts as unreachable, in ms.
   * @defaultValue 5000
   */
  readonly connectTimeoutMs?: number;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 5000;

/**
 * The {@link SystemAdmin} of a Harrier system in PostgreSQL (the `harrier` CLI and dashboard on a
 * `postgres://` URL): its dead-letter, checkpoint and saga stores in one schema, on one pool.
 *
 * @remarks
 * PostgreSQL keeps no event log, so {@link PostgresAdmin.projectionLags} has no log end to compare
 * checkpoints with: it returns no rows and {@link PostgresAdmin.eventLogNote} says so. The topology
 * and the broker to replay through are the PostgreSQL broker's, when endpoints registered with one.
 */
export class PostgresAdmin implements SystemAdmin {
  readonly #handle: PoolHandle;
  readonly #connection: PostgresConnectionOptions;
  readonly #tables: PostgresTables;
  readonly #opened: { close(): Promise<void> }[] = [];
  #closed = false;
  #outbox: PostgresOutboxAdmin | undefined;

  private constructor(handle: PoolHandle, connection: PostgresConnectionOptions, tables: PostgresTables) {
    this.#handle = handle;
    this.#connection = connection;
    this.#tables = tables;
  }

  /** @see {@link openPostgresAdmin} */
  static async open(
    connection: PostgresConnectionOptions,
    options: PostgresAdminOptions = {},
  ): Promise<PostgresAdmin> {
    const tables = postgresTables(options.schema);
    const timeout = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const handle = openPool(
      isPool(connection)
        ? connection
        : {
            ...(typeof connection === 'string' ? { connectionString: connection } : connection),
            connectionTimeoutMillis: timeout,
            max: 4,
          },
    );
    try {
      await handle.pool.query('SELECT 1');
    } catch (error) {
      await handle.end();
      throw postgresError(error, connection, 'connecting');
    }
    return new PostgresAdmin(handle, connection, tables);
  }

  /** The schema of the system. */
  get schema(): string {
    return this.#tables.schema;
  }

  readonly eventLogNote =
    'PostgreSQL keeps no event log: the lag of a projection shows where its log is (run `harrier projections status` with that log’s URL, e.g. redis://..., or read the application’s projection lag metric); these are the checkpoints stored in PostgreSQL';

  /** No rows: PostgreSQL keeps no event log to measure lag against (see {@link PostgresAdmin.eventLogNote}). */
  projectionLags(): Promise<CheckpointLag[]> {
    this.#checkOpen();
    return Promise.resolve([]);
  }

  /** The endpoints and queue depths of the PostgreSQL broker in the schema, when it has its tables. */
  async topology(): Promise<Topology> {
    this.#checkOpen();
    try {
      return await postgresTopology(this.#handle.pool, this.#tables, Date.now());
    } catch (error) {
      throw postgresError(error, this.#connection, 'reading the topology');
    }
  }

  /** The system's dead-letter store, on this admin's pool. */
  deadLetterStore(): PostgresDeadLetterStore {
    return this.#track(new PostgresDeadLetterStore({ connection: this.#pool, schema: this.#tables.schema }));
  }

  /** The system's checkpoint store, on this admin's pool. */
  checkpointStore(): PostgresCheckpointStore {
    return this.#track(new PostgresCheckpointStore({ connection: this.#pool, schema: this.#tables.schema }));
  }

  /**
   * The system's saga store, on this admin's pool.
   *
   * @remarks
   * Reading needs no retention; pass the application's `completedRetentionMs` only to save through it.
   */
  sagaStore(options: { readonly completedRetentionMs?: number } = {}): PostgresSagaStore {
    return this.#track(
      new PostgresSagaStore({ connection: this.#pool, schema: this.#tables.schema, ...options }),
    );
  }

  /**
   * The system's delivery ledger (the `PostgresDeliveryLedger` of its RabbitMQ brokers, in the
   * schema), on this admin's pool: a replay through RabbitMQ goes through it.
   */
  deliveryLedger(): PostgresDeliveryLedger {
    return this.#track(new PostgresDeliveryLedger({ connection: this.#pool, schema: this.#tables.schema }));
  }

  /** The system's schedule store, on this admin's pool and schema. */
  scheduleStore(): PostgresScheduleStore {
    return this.#track(new PostgresScheduleStore({ connection: this.#pool, schema: this.#tables.schema }));
  }

  /**
   * A `PostgresBroker` of the system, on this admin's pool and schema, to send messages back through
   * (`harrier dlq replay`, the dashboard's actions); closed with the admin.
   * @throws HarrierError `invalid-argument` when no endpoint ever registered with a PostgresBroker in
   *   the schema (the system's broker is elsewhere, e.g. Redis): replaying here would queue messages
   *   nobody receives.
   */
  async broker(options: AdminBrokerOptions = {}): Promise<MessageBroker> {
    this.#checkOpen();
    let registered: boolean;
    try {
      const found = await this.#pool.query<{ present: boolean }>(
        `SELECT to_regclass($1) IS NOT NULL AS present`,
        [`${this.#tables.quotedSchema}.routes`],
      );
      registered =
        found.rows[0]?.present === true &&
        (await this.#pool.query(`SELECT 1 FROM ${this.#tables.routes} LIMIT 1`)).rows.length > 0;
    } catch (error) {
      throw postgresError(error, this.#connection, 'reading the registered endpoints');
    }
    if (!registered) {
      throw new HarrierError(
        'invalid-argument',
        `Cannot send messages back through PostgreSQL: no endpoint registered with a PostgresBroker in schema "${this.#tables.schema}", so the system's broker is elsewhere. Replay where the broker is (e.g. \`harrier dlq replay --url redis://...\` when the dead letters are there), or from the application: replayDeadLetters({ store: new PostgresDeadLetterStore({ connection, schema: '${this.#tables.schema}' }), broker, ids })`,
      );
    }
    return this.#track(
      new PostgresBroker({
        connection: this.#pool,
        schema: this.#tables.schema,
        ...(options.logger !== undefined ? { logger: options.logger } : {}),
      }),
    );
  }

  /** The parked rows of the system's outbox, on this admin's pool. */
  outboxAdmin(): PostgresOutboxAdmin {
    this.#outbox ??= this.#track(
      new PostgresOutboxAdmin({ connection: this.#pool, schema: this.#tables.schema }),
    );
    return this.#outbox;
  }

  /** Closes everything opened through this admin, then its pool (a pool passed in stays open). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const opened = this.#opened.splice(0).reverse();
    await Promise.allSettled(opened.map((part) => part.close()));
    await this.#handle.end();
  }

  get #pool(): pg.Pool {
    return this.#handle.pool;
  }

  #track<T extends { close(): Promise<void> }>(part: T): T {
    this.#checkOpen();
    this.#opened.push(part);
    return part;
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'admin-closed',
        'The PostgresAdmin is closed: open a new one with openPostgresAdmin',
      );
    }
  }
}

/**
 * Opens a {@link PostgresAdmin} on the Harrier system in `options.schema`: connects, and checks that
 * PostgreSQL answers.
 *
 * @example
 * ```ts
 * const admin = await openPostgresAdmin(process.env.DATABASE_URL!, { schema: 'harrier' });
 * try {
 *   console.log(await admin.deadLetterStore().count());
 * } finally {
 *   await admin.close();
 * }
 * ```
 * @throws HarrierError `postgres-unavailable` when PostgreSQL cannot be reached, `invalid-option`
 * for a bad schema name.
 */
export function openPostgresAdmin(
  connection: PostgresConnectionOptions,
  options: PostgresAdminOptions = {},
): Promise<PostgresAdmin> {
  return PostgresAdmin.open(connection, options);
}
