import type pg from 'pg';
import type {
  OutboxAdmin,
  ParkedOutboxPage,
  ParkedOutboxPageOptions,
  ParkedOutboxReason,
  ParkedOutboxRow,
  ReplayAllParkedOptions,
} from '../admin/outbox-admin.js';
import { HarrierError } from '../errors/harrier-error.js';
import { holdClient } from './held-client.js';
import { requireSchema } from './migrate-postgres.js';
import { outboxChannel } from './outbox-rows.js';
import type { PostgresConnectionOptions } from './postgres-connection.js';
import { openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';

/** Options of {@link PostgresOutboxAdmin}. */
export interface PostgresOutboxAdminOptions {
  /**
   * Where PostgreSQL is: a URL or pool options (the admin opens a pool and ends it on close), or the
   * application's `pg.Pool` (shared, never ended by the admin).
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema of Harrier's tables: the relay's `schema`.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
}

interface ParkedRow {
  readonly id: string;
  readonly message_id: string;
  readonly kind: string;
  readonly type: string;
  readonly body: string;
  readonly partition_key: string | null;
  readonly ordered: boolean;
  readonly lane: number;
  readonly topic: string | null;
  readonly deliver_at: string | null;
  readonly reason: ParkedOutboxReason;
  readonly error_code: string | null;
  readonly error: string;
  readonly attempts: number;
  readonly created_at: string;
  readonly first_failed_at: string;
  readonly last_failed_at: string;
  readonly parked_at: string;
}

const PARKED_COLUMNS = `id, message_id, kind, type, body, partition_key, ordered, lane, topic, deliver_at, reason,
  error_code, error, attempts, created_at, first_failed_at, last_failed_at, parked_at`;

/** The outbox columns a replay copies back from a parked row; the tries start again from 0. */
const OUTBOX_COLUMNS = `message_id, kind, type, body, partition_key, ordered, lane, topic, deliver_at, require_route, created_at`;

const REPLAY_BATCH = 100;
const MAX_LIMIT = 1000;

function parkedOf(row: ParkedRow): ParkedOutboxRow {
  return {
    id: row.id,
    messageId: row.message_id,
    kind: row.kind,
    type: row.type,
    body: row.body,
    partitionKey: row.partition_key ?? undefined,
    ordered: row.ordered,
    lane: row.lane,
    topic: row.topic ?? undefined,
    deliverAt: row.deliver_at === null ? undefined : Number(row.deliver_at),
    reason: row.reason,
    errorCode: row.error_code ?? undefined,
    error: row.error,
    attempts: row.attempts,
    createdAt: Number(row.created_at),
    firstFailedAt: Number(row.first_failed_at),
    lastFailedAt: Number(row.last_failed_at),
    parkedAt: Number(row.parked_at),
  };
}

/** A parked row's id as given by a user: digits only, else no row has it. */
const isId = (id: string): boolean => /^[1-9]\d{0,18}$/.test(id);

/**
 * Lists, shows, replays and deletes the outbox rows the relay parked (see `maxAttempts` of
 * {@link startOutboxRelay}) in Harrier's PostgreSQL schema: what `harrier postgres outbox` runs.
 *
 * @remarks
 * A replay moves the row back into the outbox in one transaction (deleted from `outbox_parked`,
 * inserted in `outbox` with a new sequence number, so at the end of its lane, and its tries at 0)
 * and notifies the relays. It keeps the message id, so a message the broker did take before is
 * absorbed by the idempotent publish. The admin checks the schema version on first use
 * (`schema-outdated` naming the migrate command) and never migrates.
 *
 * @example
 * ```ts
 * const admin = new PostgresOutboxAdmin({ connection: process.env.DATABASE_URL! });
 * const { rows } = await admin.listParked();
 * for (const row of rows) if (row.errorCode === 'no-route') await admin.replayParked(row.id);
 * await admin.close();
 * ```
 */
export class PostgresOutboxAdmin implements OutboxAdmin {
  readonly #connection: PostgresConnectionOptions;
  readonly #handle: PoolHandle;
  readonly #tables: PostgresTables;
  #ready: Promise<void> | undefined;
  #closed = false;

  /** @throws HarrierError `invalid-option` for a bad schema name. */
  constructor(options: PostgresOutboxAdminOptions) {
    this.#tables = postgresTables(options.schema);
    this.#connection = options.connection;
    this.#handle = openPool(options.connection);
  }

  async countParked(): Promise<number> {
    return this.#use('counting parked outbox rows', async (pool) => {
      const result = await pool.query<{ n: string }>(
        `SELECT count(*) AS n FROM ${this.#tables.outboxParked}`,
      );
      return Number(result.rows[0]?.n ?? 0);
    });
  }

  async listParked(page: ParkedOutboxPageOptions = {}): Promise<ParkedOutboxPage> {
    const limit = page.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
      throw new HarrierError(
        'invalid-argument',
        `limit ${String(limit)} is not a whole number from 1 to ${MAX_LIMIT}: ask for fewer rows per page`,
      );
    }
    if (page.cursor !== undefined && !isId(page.cursor)) {
      throw new HarrierError(
        'invalid-cursor',
        `Cursor "${page.cursor}" was not issued by listParked: pass the \`next\` of the previous page, or none for the first`,
      );
    }
    return this.#use('listing parked outbox rows', async (pool) => {
      const result = await pool.query<ParkedRow>(
        `SELECT ${PARKED_COLUMNS} FROM ${this.#tables.outboxParked}
          WHERE id > $1 ORDER BY id LIMIT $2`,
        [page.cursor ?? '0', limit + 1],
      );
      const rows = result.rows.slice(0, limit).map(parkedOf);
      const more = result.rows.length > limit;
      return { rows, next: more ? rows[rows.length - 1]?.id : undefined };
    });
  }

  async getParked(id: string): Promise<ParkedOutboxRow | undefined> {
    if (!isId(id)) return undefined;
    return this.#use('reading a parked outbox row', async (pool) => {
      const result = await pool.query<ParkedRow>(
        `SELECT ${PARKED_COLUMNS} FROM ${this.#tables.outboxParked} WHERE id = $1`,
        [id],
      );
      const row = result.rows[0];
      return row === undefined ? undefined : parkedOf(row);
    });
  }

  async replayParked(id: string): Promise<boolean> {
    if (!isId(id)) return false;
    return (await this.#replay('replaying a parked outbox row', `WHERE id = $1`, [id])) === 1;
  }

  async replayAllParked(options: ReplayAllParkedOptions = {}): Promise<number> {
    const total = await this.countParked();
    let done = 0;
    for (;;) {
      const moved = await this.#replay(
        'replaying parked outbox rows',
        `WHERE id IN (SELECT id FROM ${this.#tables.outboxParked} ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)`,
        [REPLAY_BATCH],
      );
      done += moved;
      if (moved > 0) options.onProgress?.(done, Math.max(total, done));
      if (moved < REPLAY_BATCH) return done;
    }
  }

  async deleteParked(id: string): Promise<boolean> {
    if (!isId(id)) return false;
    return this.#use('deleting a parked outbox row', async (pool) => {
      const result = await pool.query(`DELETE FROM ${this.#tables.outboxParked} WHERE id = $1`, [id]);
      return result.rowCount === 1;
    });
  }

  /** Ends the pool when the admin opened it (a pool given as `connection` stays open). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#handle.end();
  }

  /**
   * Moves the parked rows `where` selects back into the outbox in one transaction, in id order (so
   * rows of a lane keep theirs), and notifies the relays; returns how many moved.
   */
  async #replay(doing: string, where: string, values: unknown[]): Promise<number> {
    return this.#use(doing, async (pool) => {
      const held = await holdClient(pool);
      const { client } = held;
      try {
        await client.query('BEGIN');
        try {
          const moved = await client.query(
            `WITH moved AS (DELETE FROM ${this.#tables.outboxParked} ${where} RETURNING id, ${OUTBOX_COLUMNS})
             INSERT INTO ${this.#tables.outbox} (${OUTBOX_COLUMNS})
             SELECT ${OUTBOX_COLUMNS} FROM moved ORDER BY id`,
            values,
          );
          if ((moved.rowCount ?? 0) > 0) {
            await client.query(`SELECT pg_notify($1, '')`, [outboxChannel(this.#tables)]);
          }
          await client.query('COMMIT');
          return moved.rowCount ?? 0;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => undefined);
          throw error;
        }
      } finally {
        held.release();
      }
    });
  }

  async #use<T>(doing: string, action: (pool: pg.Pool) => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError('admin-closed', `PostgresOutboxAdmin was closed while ${doing}: make a new one`);
    }
    try {
      this.#ready ??= requireSchema(this.#handle.pool, this.#tables, 'PostgresOutboxAdmin').catch(
        (error: unknown) => {
          // Checked again on the next call: the schema may be migrated meanwhile.
          this.#ready = undefined;
          throw error;
        },
      );
      await this.#ready;
      return await action(this.#handle.pool);
    } catch (error) {
      throw postgresError(error, this.#connection, doing);
    }
  }
}
