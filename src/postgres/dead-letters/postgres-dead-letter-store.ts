import type pg from 'pg';
import { systemClock, type Clock } from '../../clock/clock.js';
import {
  decodeGroupCursor,
  encodeGroupCursor,
  groupPageLimit,
} from '../../dead-letters/dead-letter-groups.js';
import {
  MAX_REPLAY_HISTORY,
  type DeadLetterFilter,
  type DeadLetterGroup,
  type DeadLetterGroupPage,
  type DeadLetterGroupPageOptions,
  type DeadLetterPage,
  type DeadLetterPageOptions,
  type DeadLetterRecord,
  type DeadLetterStore,
  type ReplayRecord,
} from '../../dead-letters/dead-letter-store.js';
import { HarrierError } from '../../errors/harrier-error.js';
import type { Logger } from '../../logging/logger.js';
import { requireSchema } from '../migrate-postgres.js';
import type { PostgresConnectionOptions } from '../postgres-connection.js';
import { openPool, postgresError, type PoolHandle } from '../postgres-pool.js';
import { postgresTables, type PostgresTables } from '../postgres-schema.js';
import { decodeDeadLetterListCursor, encodeDeadLetterListCursor } from './dead-letter-list-cursor.js';
import {
  RECORD_COLUMNS,
  recordJsonOf,
  recordOf,
  replaysJsonOf,
  replaysOf,
  type DeadLetterRow,
} from './dead-letter-row.js';
import { searchTextOf, storableText } from './dead-letter-search.js';
import { deadLetterWhere } from './dead-letter-where.js';

/** Options of {@link PostgresDeadLetterStore}. */
export interface PostgresDeadLetterStoreOptions {
  /**
   * Where PostgreSQL is: a `postgres://` URL or pool options (the store creates a pool and ends it on
   * {@link PostgresDeadLetterStore.close}), or a `pg.Pool` to share (the store never ends it).
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema holding Harrier's tables, as migrated by `harrier postgres migrate --schema`.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * Stamps the `stored_at` and `updated_at` columns (ms since the epoch); the record's own times
   * come from the record.
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
  /**
   * Where a pool the store creates reports an idle connection the server ended.
   * @defaultValue none (such a connection is dropped silently; the pool opens a new one)
   */
  readonly logger?: Logger;
  /**
   * Most records one page of a text search reads, as a span of insertion sequence, when the schema
   * has no trigram index (pg_trgm was not available to the migration): such a page may end early,
   * with fewer than `limit` records and a `next` cursor, so a rare text answers quickly.
   * @defaultValue 20000
   */
  readonly textScanBudget?: number;
}

const DEFAULT_PAGE_LIMIT = 100;
const DEFAULT_TEXT_SCAN_BUDGET = 20_000;
/** Compare-and-set attempts of a replay mark before it gives up on a record written meanwhile. */
const MARK_ATTEMPTS = 20;

interface GroupRow {
  fingerprint: string;
  count: string;
  first_seen: string;
  last_seen: string;
  type: string | null;
  handler: string | null;
  endpoint: string;
  reason: string;
  sample_error: string | null;
}

/**
 * Keeps dead letters in PostgreSQL, one row per record in the `dead_letters` table of Harrier's
 * schema, so they outlive restarts and every process sees the same ones.
 *
 * @remarks
 * Lists follow the first-insertion order (`seq`; an update keeps its row), filters are SQL over
 * indexed copies of the record's fields, and failure groups are one `GROUP BY fingerprint` over an
 * index that holds every column it aggregates. Text search is a `LIKE` over a lower-cased copy of
 * the error and the envelope: with the trigram index the migration creates when pg_trgm is
 * available it reads only matching rows; without it a page reads at most `textScanBudget` rows
 * (see {@link PostgresDeadLetterStoreOptions.textScanBudget}). The envelope is kept as its UTF-8
 * bytes (bytea), so a body with NUL characters comes back whole.
 *
 * The schema must be migrated first (`harrier postgres migrate`); the first call checks it and
 * rejects with `schema-outdated` when it is missing or behind. Calls reject with
 * `postgres-unavailable` when the server cannot be reached, `store-closed` after
 * {@link PostgresDeadLetterStore.close}, `invalid-cursor` and `invalid-argument` for bad paging.
 *
 * @example
 * ```ts
 * const deadLetters = new PostgresDeadLetterStore({ connection: process.env.DATABASE_URL! });
 * const { records, next } = await deadLetters.list({ endpoint: 'billing' }, { limit: 50 });
 * await deadLetters.close();
 * ```
 */
export class PostgresDeadLetterStore implements DeadLetterStore {
  readonly #handle: PoolHandle;
  readonly #connection: PostgresConnectionOptions;
  readonly #tables: PostgresTables;
  readonly #clock: Clock;
  readonly #textScanBudget: number;
  #ready: Promise<boolean> | undefined;
  #closed = false;

  /**
   * @throws HarrierError `invalid-option` when `connection` is missing, `schema` is not a plain
   * lower-case identifier or `textScanBudget` is not a positive whole number.
   */
  constructor(options: PostgresDeadLetterStoreOptions) {
    // Callers in plain JavaScript can leave it out.
    if ((options.connection as PostgresConnectionOptions | undefined) == null) {
      throw new HarrierError(
        'invalid-option',
        'PostgresDeadLetterStore needs a connection: pass { connection: process.env.DATABASE_URL } or the pg.Pool of your application',
      );
    }
    const budget = options.textScanBudget ?? DEFAULT_TEXT_SCAN_BUDGET;
    if (!Number.isSafeInteger(budget) || budget < 1) {
      throw new HarrierError(
        'invalid-option',
        `PostgresDeadLetterStore textScanBudget must be a positive whole number, got ${budget}: pass e.g. 20000, or leave it out for the default`,
      );
    }
    this.#tables = postgresTables(options.schema);
    this.#clock = options.clock ?? systemClock;
    this.#textScanBudget = budget;
    this.#connection = options.connection;
    this.#handle = openPool(options.connection, options.logger);
  }

  add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    return this.#run('adding a dead letter', async (pool) => {
      const t = this.#tables;
      const now = this.#clock.now();
      const result = await pool.query<DeadLetterRow>(
        `INSERT INTO ${t.deadLetters} AS d (id, touched, status, endpoint, type, handler, reason, fingerprint,
           first_failed_at, last_failed_at, record, envelope, replays, search, stored_at, updated_at)
         VALUES ($1, nextval('${t.deadLetterWrites}'), 'dead', $2, $3, $4, $5, $6, $7, $8, $9, $10, '[]', $11, $12, $12)
         ON CONFLICT (id) DO UPDATE SET touched = EXCLUDED.touched, version = d.version + 1, status = 'dead',
           endpoint = EXCLUDED.endpoint, type = EXCLUDED.type, handler = EXCLUDED.handler,
           reason = EXCLUDED.reason, fingerprint = EXCLUDED.fingerprint,
           last_failed_at = EXCLUDED.last_failed_at, record = EXCLUDED.record,
           envelope = EXCLUDED.envelope, search = EXCLUDED.search, updated_at = EXCLUDED.updated_at
         RETURNING ${RECORD_COLUMNS}`,
        [
          storableText(record.id),
          storableText(record.endpoint),
          record.type === undefined ? null : storableText(record.type),
          record.handler === undefined ? null : storableText(record.handler),
          storableText(record.reason),
          storableText(record.fingerprint),
          record.firstFailedAt,
          record.lastFailedAt,
          recordJsonOf(record),
          Buffer.from(record.envelope, 'utf8'),
          searchTextOf(record),
          now,
        ],
      );
      const row = result.rows[0];
      if (row === undefined) throw new HarrierError('internal', 'Adding a dead letter returned no row');
      return recordOf(row);
    });
  }

  get(id: string): Promise<DeadLetterRecord | undefined> {
    return this.#run('reading a dead letter', async (pool) => {
      if (id.includes('\0')) return undefined;
      const result = await pool.query<DeadLetterRow>(
        `SELECT ${RECORD_COLUMNS} FROM ${this.#tables.deadLetters} WHERE id = $1`,
        [id],
      );
      const row = result.rows[0];
      return row === undefined ? undefined : recordOf(row);
    });
  }

  /** @throws HarrierError `invalid-cursor` for a cursor this store did not issue, `invalid-argument` for a bad limit. */
  list(filter: DeadLetterFilter = {}, page: DeadLetterPageOptions = {}): Promise<DeadLetterPage> {
    return this.#run('listing dead letters', async (pool, indexed) => {
      const limit = page.limit ?? DEFAULT_PAGE_LIMIT;
      if (!Number.isInteger(limit) || limit < 1) {
        throw new HarrierError(
          'invalid-argument',
          `Dead-letter page limit must be a positive integer, got ${limit}: pass a whole number such as 100, or leave it out for the default`,
        );
      }
      const after = page.cursor === undefined ? '0' : decodeDeadLetterListCursor(page.cursor);
      const values: unknown[] = [after];
      const where = deadLetterWhere(filter, values);
      // Without a trigram index a rare text would read the whole table for one page: read a span.
      const bounded = !indexed && filter.text !== undefined && filter.text !== '';
      const spanEnd = bounded ? (BigInt(after) + BigInt(this.#textScanBudget)).toString() : undefined;
      if (spanEnd !== undefined) values.push(spanEnd);
      values.push(limit + 1);
      const result = await pool.query<DeadLetterRow>(
        `SELECT ${RECORD_COLUMNS} FROM ${this.#tables.deadLetters}
         WHERE seq > $1 ${spanEnd === undefined ? '' : `AND seq <= $${values.length - 1}`} AND ${where}
         ORDER BY seq LIMIT $${values.length}`,
        values,
      );
      const rows = result.rows.slice(0, limit);
      const records = rows.map(recordOf);
      const last = rows.at(-1);
      if (result.rows.length > limit && last !== undefined) {
        return { records, next: encodeDeadLetterListCursor(last.position) };
      }
      if (spanEnd !== undefined && (await this.#hasRowsAfter(pool, spanEnd))) {
        return { records, next: encodeDeadLetterListCursor(spanEnd) };
      }
      return { records, next: undefined };
    });
  }

  count(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run('counting dead letters', async (pool) => {
      const values: unknown[] = [];
      const result = await pool.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM ${this.#tables.deadLetters} WHERE ${deadLetterWhere(filter, values)}`,
        values,
      );
      return Number(result.rows[0]?.n ?? 0);
    });
  }

  markReplayed(id: string, replay: ReplayRecord): Promise<boolean> {
    return this.#run('marking a dead letter replayed', async (pool) => {
      const entry: ReplayRecord = {
        at: replay.at,
        ...(replay.by !== undefined ? { by: replay.by } : {}),
        ...(replay.handledAt !== undefined ? { handledAt: replay.handledAt } : {}),
      };
      return this.#update(pool, id, (_status, replays) => [...replays, entry].slice(-MAX_REPLAY_HISTORY));
    });
  }

  markReplayHandled(id: string, at: number): Promise<boolean> {
    return this.#run('marking a replay handled', async (pool) => {
      let marked = false;
      await this.#update(pool, id, (status, replays) => {
        const latest = replays.at(-1);
        marked = status === 'replayed' && latest !== undefined;
        if (!marked || latest === undefined || latest.handledAt !== undefined) return undefined;
        return [...replays.slice(0, -1), { ...latest, handledAt: at }];
      });
      return marked;
    });
  }

  remove(ids: readonly string[]): Promise<number> {
    return this.#run('removing dead letters', async (pool) => {
      const storable = [...new Set(ids)].filter((id) => !id.includes('\0'));
      if (storable.length === 0) return 0;
      const result = await pool.query(`DELETE FROM ${this.#tables.deadLetters} WHERE id = ANY($1::text[])`, [
        storable,
      ]);
      return result.rowCount ?? 0;
    });
  }

  purge(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run('purging dead letters', async (pool) => {
      const values: unknown[] = [];
      const result = await pool.query(
        `DELETE FROM ${this.#tables.deadLetters} WHERE ${deadLetterWhere(filter, values)}`,
        values,
      );
      return result.rowCount ?? 0;
    });
  }

  /** @throws HarrierError `invalid-cursor` for a cursor this store did not issue, `invalid-argument` for a bad limit. */
  groups(filter: DeadLetterFilter = {}, page: DeadLetterGroupPageOptions = {}): Promise<DeadLetterGroupPage> {
    return this.#run('reading dead-letter groups', async (pool) => {
      const limit = groupPageLimit(page);
      const after = page.cursor === undefined ? undefined : decodeGroupCursor(page.cursor);
      const values: unknown[] = [];
      const where = deadLetterWhere(filter, values);
      let having = '';
      if (after !== undefined) {
        values.push(after.lastSeen, after.fingerprint);
        having = `HAVING (max(last_failed_at), fingerprint) < ($${values.length - 1}::bigint, $${values.length}::text COLLATE "C")`;
      }
      values.push(limit + 1);
      const t = this.#tables;
      const result = await pool.query<GroupRow>(
        `WITH g AS (
           SELECT fingerprint, count(*) AS n, min(first_failed_at) AS first_seen,
             max(last_failed_at) AS last_seen, max(touched) AS sample
           FROM ${t.deadLetters} WHERE ${where} GROUP BY fingerprint ${having}
           ORDER BY last_seen DESC, fingerprint DESC LIMIT $${values.length})
         SELECT g.fingerprint, g.n::text AS count, g.first_seen::text AS first_seen,
           g.last_seen::text AS last_seen, s.record->>'type' AS type, s.record->>'handler' AS handler,
           s.record->>'endpoint' AS endpoint, s.record->>'reason' AS reason,
           s.record->'error'->>'message' AS sample_error
         FROM g JOIN ${t.deadLetters} s ON s.touched = g.sample AND s.fingerprint = g.fingerprint
         ORDER BY g.last_seen DESC, g.fingerprint DESC`,
        values,
      );
      const groups = result.rows.slice(0, limit).map(groupOf);
      const last = groups.at(-1);
      return {
        groups,
        next: result.rows.length > limit && last !== undefined ? encodeGroupCursor(last) : undefined,
      };
    });
  }

  /**
   * Whether text search reads a trigram index (the migration could create the pg_trgm extension)
   * rather than scanning the table.
   */
  textSearchIndexed(): Promise<boolean> {
    return this.#run('checking the dead-letter search index', (_pool, indexed) => Promise.resolve(indexed));
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

  /** Whether a row was inserted after insertion sequence `seq`. */
  async #hasRowsAfter(pool: pg.Pool, seq: string): Promise<boolean> {
    const result = await pool.query<{ more: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM ${this.#tables.deadLetters} WHERE seq > $1) AS more`,
      [seq],
    );
    return result.rows[0]?.more === true;
  }

  /**
   * Applies `change` to a record's replays with a compare-and-set on its version, trying again when
   * another write came between the read and the update; `change` returning undefined changes nothing.
   * @returns false when no record has the id.
   */
  async #update(
    pool: pg.Pool,
    id: string,
    change: (status: string, replays: readonly ReplayRecord[]) => readonly ReplayRecord[] | undefined,
  ): Promise<boolean> {
    if (id.includes('\0')) return false;
    const t = this.#tables;
    for (let attempt = 1; ; attempt++) {
      const read = await pool.query<Pick<DeadLetterRow, 'id' | 'version' | 'status' | 'replays'>>(
        `SELECT id, version, status, replays::text AS replays FROM ${t.deadLetters} WHERE id = $1`,
        [id],
      );
      const row = read.rows[0];
      if (row === undefined) return false;
      const replays = change(row.status, replaysOf(row));
      if (replays === undefined) return true;
      const updated = await pool.query(
        `UPDATE ${t.deadLetters} SET status = 'replayed', replays = $3, version = version + 1, updated_at = $4
         WHERE id = $1 AND version = $2`,
        [id, row.version, replaysJsonOf(replays), this.#clock.now()],
      );
      if (updated.rowCount === 1) return true;
      if (attempt === MARK_ATTEMPTS) {
        throw new HarrierError(
          'internal',
          `Dead letter "${id}" changed ${MARK_ATTEMPTS} times while a replay was being recorded: try again`,
        );
      }
    }
  }

  /** Runs `body` on an open store whose schema was checked, naming the server when it is unreachable. */
  async #run<T>(doing: string, body: (pool: pg.Pool, indexed: boolean) => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The PostgreSQL dead-letter store is closed: create a new PostgresDeadLetterStore to keep dead letters again',
      );
    }
    const pool = this.#handle.pool;
    try {
      this.#ready ??= this.#check(pool).catch((error: unknown) => {
        // Checked again on the next call: the schema may be migrated meanwhile.
        this.#ready = undefined;
        throw error;
      });
      return await body(pool, await this.#ready);
    } catch (error) {
      throw postgresError(error, this.#connection, doing);
    }
  }

  /** Checks the schema; resolves to whether its trigram search index exists. */
  async #check(pool: pg.Pool): Promise<boolean> {
    await requireSchema(pool, this.#tables, 'PostgresDeadLetterStore');
    const result = await pool.query<{ indexed: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS indexed`, [
      this.#tables.deadLetterSearchIndex,
    ]);
    return result.rows[0]?.indexed === true;
  }
}

function groupOf(row: GroupRow): DeadLetterGroup {
  return {
    fingerprint: row.fingerprint,
    count: Number(row.count),
    firstSeen: Number(row.first_seen),
    lastSeen: Number(row.last_seen),
    ...(row.type !== null ? { type: row.type } : {}),
    ...(row.handler !== null ? { handler: row.handler } : {}),
    endpoint: row.endpoint,
    reason: row.reason,
    sampleError: row.sample_error ?? '',
  };
}
