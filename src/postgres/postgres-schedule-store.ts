import type pg from 'pg';
import { HarrierError } from '../errors/harrier-error.js';
import {
  decodeScheduleRecord,
  decodeScheduleTickError,
  encodeScheduleDefinition,
  encodeScheduleTickError,
} from '../schedules/schedule-record.js';
import type { ScheduleRecord, ScheduleTickError } from '../schedules/schedule-record.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';
import { requireSchema } from './migrate-postgres.js';
import type { PostgresConnectionOptions } from './postgres-connection.js';
import { openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';

/** Options of {@link PostgresScheduleStore}. */
export interface PostgresScheduleStoreOptions {
  /**
   * Where PostgreSQL is: a URL or pool options (the store opens a pool and ends it on close), or the
   * application's `pg.Pool` (shared, never ended by the store).
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema of Harrier's tables (migrated with `harrier postgres migrate`).
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
}

interface ScheduleRow {
  readonly name: string;
  readonly definition: string;
  readonly last_tick_at: string | null;
  readonly next_run_at: string | null;
  readonly last_message_id: string | null;
  readonly last_error: string | null;
}

const COLUMNS = 'name, definition, last_tick_at, next_run_at, last_message_id, last_error';

const timeOf = (value: string | null): number | undefined => (value === null ? undefined : Number(value));

/**
 * Keeps recurring schedules in PostgreSQL, in the `schedules` table of Harrier's schema (migrations
 * 6 and 8), shared by every process of an application.
 *
 * @remarks
 * One row per schedule: its definition as JSON text, and the last tick sent with its message id,
 * raised by one conditional UPDATE so a tick is never recorded twice nor lowered; `last_error` holds
 * the failure of a later tick's send as JSON text until a later tick is recorded. The store checks the schema
 * version on first use (`schema-outdated` naming the migrate command) and never migrates. Failures
 * reject with `postgres-unavailable`, `schema-outdated`, or `store-closed` after
 * {@link PostgresScheduleStore.close}.
 *
 * @example
 * ```ts
 * const bus = createBus({ scheduleStore: new PostgresScheduleStore({ connection: pool }), ... });
 * ```
 */
export class PostgresScheduleStore implements ScheduleStore {
  readonly #connection: PostgresConnectionOptions;
  readonly #handle: PoolHandle;
  readonly #tables: PostgresTables;
  #ready: Promise<void> | undefined;
  #closed = false;

  /** @throws HarrierError `invalid-option` for a bad schema name. */
  constructor(options: PostgresScheduleStoreOptions) {
    this.#tables = postgresTables(options.schema);
    this.#connection = options.connection;
    this.#handle = openPool(options.connection);
  }

  async get(name: string): Promise<ScheduleRecord | undefined> {
    const rows = await this.#query<ScheduleRow>(
      'reading a schedule',
      `SELECT ${COLUMNS} FROM ${this.#tables.schedules} WHERE name = $1`,
      [name],
    );
    return rows[0] === undefined ? undefined : this.#decode(rows[0]);
  }

  async list(): Promise<ScheduleRecord[]> {
    const rows = await this.#query<ScheduleRow>(
      'listing schedules',
      `SELECT ${COLUMNS} FROM ${this.#tables.schedules} ORDER BY name`,
      [],
    );
    return rows.flatMap((row) => this.#decode(row) ?? []);
  }

  async put(record: ScheduleRecord): Promise<void> {
    await this.#query(
      'storing a schedule',
      `INSERT INTO ${this.#tables.schedules}
         (name, definition, last_tick_at, next_run_at, updated_at, last_message_id, last_error)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (name) DO UPDATE SET definition = EXCLUDED.definition, last_tick_at = EXCLUDED.last_tick_at,
         next_run_at = EXCLUDED.next_run_at, updated_at = EXCLUDED.updated_at,
         last_message_id = EXCLUDED.last_message_id, last_error = EXCLUDED.last_error`,
      [
        record.name,
        encodeScheduleDefinition(record),
        record.lastTickAt ?? null,
        record.nextRunAt ?? null,
        record.updatedAt,
        record.lastMessageId ?? null,
        record.lastError === undefined ? null : encodeScheduleTickError(record.lastError),
      ],
    );
  }

  async recordTick(
    name: string,
    tickAt: number,
    nextRunAt: number | undefined,
    messageId?: string,
  ): Promise<boolean> {
    const rows = await this.#query<{ name: string }>(
      'recording a schedule tick',
      `UPDATE ${this.#tables.schedules}
         SET last_tick_at = $2, next_run_at = $3, last_message_id = $4, last_error = NULL
       WHERE name = $1 AND (last_tick_at IS NULL OR last_tick_at < $2) RETURNING name`,
      [name, tickAt, nextRunAt ?? null, messageId ?? null],
    );
    return rows.length === 1;
  }

  async recordTickFailure(name: string, tickAt: number, error: ScheduleTickError): Promise<boolean> {
    const rows = await this.#query<{ name: string }>(
      'recording a failed schedule tick',
      `UPDATE ${this.#tables.schedules} SET last_error = $3
       WHERE name = $1 AND (last_tick_at IS NULL OR last_tick_at < $2) RETURNING name`,
      [name, tickAt, encodeScheduleTickError(error)],
    );
    return rows.length === 1;
  }

  async delete(name: string): Promise<boolean> {
    const rows = await this.#query<{ name: string }>(
      'removing a schedule',
      `DELETE FROM ${this.#tables.schedules} WHERE name = $1 RETURNING name`,
      [name],
    );
    return rows.length === 1;
  }

  /** Ends the pool when the store opened it (a pool given as `connection` stays open). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#handle.end();
  }

  #decode(row: ScheduleRow): ScheduleRecord | undefined {
    return decodeScheduleRecord(row.name, row.definition, {
      lastTickAt: timeOf(row.last_tick_at),
      nextRunAt: timeOf(row.next_run_at),
      lastMessageId: row.last_message_id ?? undefined,
      lastError: decodeScheduleTickError(row.last_error),
    });
  }

  async #query<R extends pg.QueryResultRow>(doing: string, sql: string, values: unknown[]): Promise<R[]> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        `PostgresScheduleStore was closed while ${doing}: make a new store`,
      );
    }
    try {
      this.#ready ??= requireSchema(this.#handle.pool, this.#tables, 'PostgresScheduleStore').catch(
        (error: unknown) => {
          // Checked again on the next call: the schema may be migrated meanwhile.
          this.#ready = undefined;
          throw error;
        },
      );
      await this.#ready;
      return (await this.#handle.pool.query<R>(sql, values)).rows;
    } catch (error) {
      throw postgresError(error, this.#connection, doing);
    }
  }
}
