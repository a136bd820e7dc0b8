import type pg from 'pg';
import { systemClock, type Clock } from '../clock/clock.js';
import type { TransactionalUnitOfWork } from '../dispatch/transactional-unit-of-work.js';
import { HarrierError } from '../errors/harrier-error.js';
import { SagaConflictError } from '../errors/saga-conflict-error.js';
import {
  completedRetentionOf,
  decodeSagaCursor,
  encodeSagaCursor,
  sagaPageLimit,
  serializeSagaWrite,
  type SagaInstance,
  type SagaSummary,
  type SagaListFilter,
  type SagaPage,
  type SagaPageOptions,
  type SagaStatus,
  type SagaStore,
  type SagaStoreCall,
  type SagaWrite,
} from '../sagas/saga-store.js';
import { requireSchema } from './migrate-postgres.js';
import { describePostgres, type PostgresConnectionOptions } from './postgres-connection.js';
import { openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';
import { sessionOf } from './postgres-session.js';
import { unitTargetOf } from './postgres-unit-of-work.js';
import { sameDatabase } from './same-database.js';

/** What the store runs its statements on: its pool, or the transaction of a unit it joined. */
type Queryable = Pick<pg.Pool, 'query'>;

/** Options of {@link PostgresSagaStore}. */
export interface PostgresSagaStoreOptions {
  /**
   * Where PostgreSQL is (see {@link PostgresConnectionOptions}): a `postgres://` URL or pool options
   * (the store creates a pool and ends it on {@link PostgresSagaStore.close}), or a `pg.Pool` to
   * share (the store never ends it).
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema holding Harrier's tables, as migrated by `harrier postgres migrate --schema`.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * How long a completed instance is kept after its latest save, in ms (measured with `clock`).
   * @defaultValue 604800000 (7 days)
   */
  readonly completedRetentionMs?: number;
  /**
   * The clock that stamps a completed instance's expiry and decides, on every read, whether it ran
   * out (the write's `now` is not used for that, as in every Harrier saga store).
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
}

/** Expired rows one sweep deletes at most. */
const SWEEP_BATCH = 500;
/** How long a store waits between sweeps that found fewer than {@link SWEEP_BATCH} expired rows. */
const SWEEP_INTERVAL_MS = 60_000;
/** Compare-and-set attempts when the version read after a miss equals the expected one. */
const SAVE_ATTEMPTS = 5;

/** A row as the store selects it: JSON columns as text, bigints as text. */
interface SagaRow {
  saga: string;
  id: string;
  version: string;
  status: SagaStatus;
  state: string;
  state_version: string;
  applied?: string;
  timeouts: string;
  started_at: string;
  updated_at: string;
  completed_at: string | null;
}

/**
 * Selected as text so a shared pool's type parsers (the application may parse json or int8 its own
 * way) never change what the store returns.
 */
const SUMMARY_COLUMNS = `saga, id, version::text AS version, status, state::text AS state,
  state_version::text AS state_version, timeouts::text AS timeouts, started_at::text AS started_at, updated_at::text AS updated_at,
  completed_at::text AS completed_at`;

/** {@link SUMMARY_COLUMNS} and the applied steps: what `get` and `save` return. */
const COLUMNS = `${SUMMARY_COLUMNS}, applied::text AS applied`;

/** True while a row's retention has not run out at `$n` (ms by the store's clock). */
const live = (n: number): string => `(expires_at IS NULL OR expires_at > $${n})`;

/**
 * Keeps saga instances in PostgreSQL, one row per (saga, id) in the `sagas` table of Harrier's
 * schema, next to the application's own tables.
 *
 * @remarks
 * `save` is one compare-and-set statement: an `INSERT ... ON CONFLICT` that creates (or replaces a
 * row whose retention ran out) for expected version 0, an `UPDATE ... WHERE version = $expected`
 * otherwise; of two saves of one version, in any number of processes, exactly one wins and the
 * other gets a `SagaConflictError` with the stored version. State, applied steps and timeouts are
 * kept as the JSON text `JSON.stringify` wrote (`json` columns), so `get` returns what every other
 * store returns. A completed instance gets an expiry of `completedRetentionMs` from its latest save
 * (by `clock`); reads treat an expired row as absent at once, and the store deletes expired rows in
 * batches of 500 during saves, at most once a minute per store while there are few, and
 * {@link PostgresSagaStore.prune} deletes all of them. `list` orders by saga name, then id, as UTF-8
 * bytes (the key columns are `COLLATE "C"`), reading the primary key in order.
 *
 * The schema must be migrated first (`harrier postgres migrate`); the first call checks it and
 * rejects with `schema-outdated` when it is missing or behind. Calls reject with
 * `postgres-unavailable` when the server cannot be reached and with `store-closed` after
 * {@link PostgresSagaStore.close}.
 *
 * @example
 * ```ts
 * const sagaStore = new PostgresSagaStore({ connection: process.env.DATABASE_URL! });
 * const bus = createBus({ endpoint: 'orders', broker, sagas: [OrderFulfilment], sagaStore });
 * ```
 */
export class PostgresSagaStore implements SagaStore {
  readonly #handle: PoolHandle;
  readonly #connection: PostgresConnectionOptions;
  readonly #tables: PostgresTables;
  readonly #retentionMs: number;
  readonly #clock: Clock;
  #ready: Promise<void> | undefined;
  #nextSweepAt = Number.NEGATIVE_INFINITY;
  #closed = false;
  /** The units of work whose transactions this store reads and saves in (see joinUnitOfWork). */
  readonly #units = new WeakSet<object>();

  /**
   * @throws HarrierError `invalid-option` when `connection` is missing, `schema` is not a plain
   * lower-case identifier or `completedRetentionMs` is not a positive whole number.
   */
  constructor(options: PostgresSagaStoreOptions) {
    // Callers in plain JavaScript can leave it out.
    if ((options.connection as PostgresConnectionOptions | undefined) == null) {
      throw new HarrierError(
        'invalid-option',
        'PostgresSagaStore needs a connection: pass { connection: process.env.DATABASE_URL } or the pg.Pool of your application',
      );
    }
    this.#tables = postgresTables(options.schema);
    this.#retentionMs = completedRetentionOf(options.completedRetentionMs, 'PostgresSagaStore');
    this.#clock = options.clock ?? systemClock;
    this.#connection = options.connection;
    this.#handle = openPool(options.connection);
  }

  get(saga: string, id: string, call?: SagaStoreCall): Promise<SagaInstance | undefined> {
    const session = this.#sessionOf(call);
    return this.#run('reading a saga instance', session, async (db) => {
      if (!storable(saga) || !storable(id)) return undefined;
      if (session !== undefined) {
        // Serialises the steps of one instance across processes until the unit commits, even
        // before its row exists (two first steps would otherwise both create it).
        await db.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [
          `harrier-saga:${JSON.stringify([this.#tables.schema, saga, id])}`,
        ]);
      }
      const result = await db.query<SagaRow>(
        `SELECT ${COLUMNS} FROM ${this.#tables.sagas} WHERE saga = $1 AND id = $2 AND ${live(3)}${session === undefined ? '' : ' FOR UPDATE'}`,
        [saga, id, this.#clock.now()],
      );
      const row = result.rows[0];
      return row === undefined ? undefined : toInstance(row);
    });
  }

  save(write: SagaWrite, expectedVersion: number, call?: SagaStoreCall): Promise<SagaInstance> {
    const session = this.#sessionOf(call);
    return this.#run('saving a saga instance', session, async (db) => {
      const json = serializeSagaWrite(write, expectedVersion);
      if (!storable(write.saga) || !storable(write.id)) {
        throw new HarrierError(
          'invalid-argument',
          `Cannot save saga "${write.saga}" instance "${write.id}": PostgreSQL text cannot hold a NUL character (\\0); remove it from the saga name and id`,
        );
      }
      for (let attempt = 1; ; attempt++) {
        const now = this.#clock.now();
        const expiresAt = write.status === 'completed' ? now + this.#retentionMs : null;
        // $1..$9, shared by both statements; completed_at is $7 (the write's now) on completion.
        const values = [
          write.saga,
          write.id,
          write.status,
          json.state,
          json.applied,
          json.timeouts,
          write.now,
          expiresAt,
          json.stateVersion,
        ];
        const result =
          expectedVersion === 0
            ? await db.query<SagaRow>(
                `INSERT INTO ${this.#tables.sagas} AS s
                   (saga, id, version, status, state, applied, timeouts, started_at, updated_at, completed_at, expires_at, state_version)
                 VALUES ($1, $2, 1, $3::text, $4, $5, $6, $7::bigint, $7::bigint,
                   CASE WHEN $3::text = 'completed' THEN $7::bigint END, $8, $9::integer)
                 ON CONFLICT (saga, id) DO UPDATE SET version = 1, status = EXCLUDED.status,
                   state = EXCLUDED.state, state_version = EXCLUDED.state_version, applied = EXCLUDED.applied, timeouts = EXCLUDED.timeouts,
                   started_at = EXCLUDED.started_at, updated_at = EXCLUDED.updated_at,
                   completed_at = EXCLUDED.completed_at, expires_at = EXCLUDED.expires_at
                 WHERE s.expires_at <= $10
                 RETURNING ${COLUMNS}`,
                [...values, now],
              )
            : await db.query<SagaRow>(
                `UPDATE ${this.#tables.sagas} AS s SET version = s.version + 1, status = $3::text,
                   state = $4, state_version = $9::integer, applied = $5, timeouts = $6, updated_at = $7::bigint,
                   completed_at = CASE WHEN $3::text = 'completed'
                     THEN CASE WHEN s.status = 'completed' THEN s.completed_at ELSE $7::bigint END END,
                   expires_at = $8
                 WHERE s.saga = $1 AND s.id = $2 AND s.version = $11 AND (s.expires_at IS NULL OR s.expires_at > $10)
                 RETURNING ${COLUMNS}`,
                [...values, now, expectedVersion],
              );
        const row = result.rows[0];
        if (row !== undefined) {
          // In a unit's transaction the sweep runs beside it (a failed statement would abort it).
          if (session === undefined) await this.#sweepIfDue();
          else void this.#sweepIfDue();
          return toInstance(row);
        }
        const actual = await this.#versionOf(db, write.saga, write.id);
        // The row changed between the two statements and is back at the expected version: try again.
        if (actual !== expectedVersion || attempt === SAVE_ATTEMPTS) {
          throw new SagaConflictError(write.saga, write.id, expectedVersion, actual);
        }
      }
    });
  }

  list(filter: SagaListFilter = {}, page: SagaPageOptions = {}): Promise<SagaPage> {
    return this.#run('listing saga instances', undefined, async (pool) => {
      const limit = sagaPageLimit(page.limit);
      const after = page.cursor === undefined ? undefined : decodeSagaCursor(page.cursor);
      if (
        (filter.saga !== undefined && !storable(filter.saga)) ||
        (after !== undefined && (!storable(after.saga) || !storable(after.id)))
      ) {
        return { instances: [] };
      }
      const values: unknown[] = [this.#clock.now()];
      const where = [live(1)];
      if (filter.saga !== undefined) {
        values.push(filter.saga);
        where.push(`saga = $${values.length}`);
      }
      if (filter.status !== undefined) {
        values.push(filter.status);
        where.push(`status = $${values.length}`);
      }
      if (after !== undefined) {
        values.push(after.saga, after.id);
        where.push(`(saga, id) > ($${values.length - 1}, $${values.length})`);
      }
      values.push(limit + 1);
      const result = await pool.query<SagaRow>(
        `SELECT ${SUMMARY_COLUMNS} FROM ${this.#tables.sagas} WHERE ${where.join(' AND ')}
         ORDER BY saga, id LIMIT $${values.length}`,
        values,
      );
      const instances = result.rows.slice(0, limit).map(toSummary);
      const last = instances.at(-1);
      return result.rows.length > limit && last !== undefined
        ? { instances, next: encodeSagaCursor(last) }
        : { instances };
    });
  }

  remove(saga: string, id: string): Promise<boolean> {
    return this.#run('removing a saga instance', undefined, async (pool) => {
      if (!storable(saga) || !storable(id)) return false;
      const result = await pool.query<{ live: boolean }>(
        `DELETE FROM ${this.#tables.sagas} WHERE saga = $1 AND id = $2 RETURNING ${live(3)} AS live`,
        [saga, id, this.#clock.now()],
      );
      return result.rows[0]?.live === true;
    });
  }

  /**
   * Deletes every completed instance whose retention ran out, in batches, and returns how many.
   *
   * @remarks
   * Expired instances are invisible to `get` and `list` already, and saves delete them a batch at a
   * time; call this from a maintenance job to empty the table of them at once.
   */
  prune(): Promise<number> {
    return this.#run('pruning expired saga instances', undefined, async () => {
      let total = 0;
      for (;;) {
        const deleted = await this.#sweep();
        total += deleted;
        if (deleted < SWEEP_BATCH) return total;
      }
    });
  }

  /**
   * Ends the pool the store created from a URL or options; a pool passed in stays open. Later calls
   * reject with `store-closed`; closing twice is harmless.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#handle.end();
  }

  /** The live version of an instance, 0 when there is none. */
  async #versionOf(db: Queryable, saga: string, id: string): Promise<number> {
    const result = await db.query<{ version: string }>(
      `SELECT version::text AS version FROM ${this.#tables.sagas} WHERE saga = $1 AND id = $2 AND ${live(3)}`,
      [saga, id, this.#clock.now()],
    );
    return Number(result.rows[0]?.version ?? 0);
  }

  /** Deletes a batch of expired rows when the previous sweep is a minute old or found a full batch. */
  async #sweepIfDue(): Promise<void> {
    const now = this.#clock.now();
    if (now < this.#nextSweepAt || this.#closed) return;
    this.#nextSweepAt = now + SWEEP_INTERVAL_MS;
    try {
      if ((await this.#sweep()) === SWEEP_BATCH) this.#nextSweepAt = now;
    } catch {
      // The save committed; the next due sweep deletes what this one could not.
    }
  }

  /**
   * Deletes up to {@link SWEEP_BATCH} expired rows, skipping rows another transaction holds (a
   * save re-creating the instance, another store's sweep); returns how many.
   */
  async #sweep(): Promise<number> {
    const result = await this.#handle.pool.query(
      `DELETE FROM ${this.#tables.sagas} WHERE (saga, id) IN (
         SELECT saga, id FROM ${this.#tables.sagas} WHERE expires_at <= $1
         ORDER BY expires_at LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED)
       AND expires_at <= $1`,
      [this.#clock.now()],
    );
    return result.rowCount ?? 0;
  }

  /**
   * Lets saga steps read and save their instance in the transaction of `unit`, when it is a
   * `postgresUnitOfWork` that runs saga steps (`kinds`) on this store's database and schema.
   *
   * @remarks
   * The bus calls it once at start. Another kind of unit, or one whose `kinds` leaves out `'saga'`,
   * keeps the steps apart (false). A unit on another schema or database is refused: its
   * transaction cannot hold this store's rows, and running apart from it would silently lose the
   * guarantee the unit was given for.
   * @throws HarrierError `invalid-option` for a unit on another schema or database, naming the fix;
   * `postgres-unavailable`, `schema-outdated` as the first call of the store or the unit.
   */
  async joinUnitOfWork(unit: TransactionalUnitOfWork): Promise<boolean> {
    const target = unitTargetOf(unit);
    if (target === undefined || !target.sagas) return false;
    const fix = `give PostgresSagaStore and postgresUnitOfWork the same connection and schema, or leave 'saga' out of the unit's kinds to keep saga state in its own transactions`;
    if (target.schema !== this.#tables.schema) {
      throw new HarrierError(
        'invalid-option',
        `PostgresSagaStore keeps saga instances in schema "${this.#tables.schema}" but postgresUnitOfWork runs in schema "${target.schema}", so a saga step cannot commit its state with its writes and messages: ${fix}`,
      );
    }
    await target.ready();
    const same = await this.#run("comparing its database with the unit of work's", undefined, () =>
      sameDatabase(target.pool, this.#handle.pool),
    );
    if (!same) {
      throw new HarrierError(
        'invalid-option',
        `PostgresSagaStore (${describePostgres(this.#connection)}) and postgresUnitOfWork (${describePostgres(target.connection)}) are on different databases, so a saga step cannot commit its state with its writes and messages: ${fix}`,
      );
    }
    this.#units.add(unit);
    return true;
  }

  /** The unit transaction a call runs in, when it runs in a unit this store joined. */
  #sessionOf(call: SagaStoreCall | undefined): pg.ClientBase | undefined {
    const session = call === undefined ? undefined : sessionOf(call.context);
    return session !== undefined && this.#units.has(session.unit) ? session.client : undefined;
  }

  /**
   * Runs `body` on an open store whose schema was checked, naming the server when it is
   * unreachable: on `client` (a unit's transaction) when given, else on the store's pool.
   */
  async #run<T>(
    doing: string,
    client: pg.ClientBase | undefined,
    body: (db: Queryable) => Promise<T>,
  ): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The PostgreSQL saga store is closed: create a new PostgresSagaStore to keep saga instances again',
      );
    }
    const pool = this.#handle.pool;
    try {
      this.#ready ??= requireSchema(pool, this.#tables, 'PostgresSagaStore').catch((error: unknown) => {
        // Checked again on the next call: the schema may be migrated meanwhile.
        this.#ready = undefined;
        throw error;
      });
      await this.#ready;
      return await body(client ?? pool);
    } catch (error) {
      throw postgresError(error, this.#connection, doing);
    }
  }
}

/** False for text PostgreSQL cannot store: a NUL character. */
function storable(text: string): boolean {
  return !text.includes('\0');
}

function toInstance(row: SagaRow): SagaInstance {
  return { ...toSummary(row), applied: JSON.parse(row.applied ?? '[]') as SagaInstance['applied'] };
}

/** A row without its applied steps (what `list` reads: they can be large). */
function toSummary(row: SagaRow): SagaSummary {
  return {
    saga: row.saga,
    id: row.id,
    state: JSON.parse(row.state) as unknown,
    stateVersion: Number(row.state_version),
    version: Number(row.version),
    status: row.status,
    startedAt: Number(row.started_at),
    updatedAt: Number(row.updated_at),
    ...(row.completed_at === null ? {} : { completedAt: Number(row.completed_at) }),
    timeouts: JSON.parse(row.timeouts) as SagaInstance['timeouts'],
  };
}
