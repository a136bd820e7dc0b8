import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { HarrierError } from '../errors/harrier-error.js';
import {
  checkCheckpointOffset,
  REQUESTED_REBUILD_PREFIX,
  type Checkpoint,
  type CheckpointStore,
  type CommitOptions,
  type ProjectionGeneration,
} from '../log/checkpoint-store.js';
import { holdClient } from './held-client.js';
import { requireSchema } from './migrate-postgres.js';
import type { PostgresConnectionOptions } from './postgres-connection.js';
import { openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';
import {
  clearRebuildMarker,
  holdGeneration,
  raiseGeneration,
  readGeneration,
  readGenerations,
} from './projection-generation-rows.js';

/** Options of {@link PostgresCheckpointStore}. */
export interface PostgresCheckpointStoreOptions {
  /**
   * Where PostgreSQL is: a URL or pool options (the store opens a pool and ends it on close), or the
   * application's `pg.Pool` (shared, never ended by the store).
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema of Harrier's tables (migrated with `harrier postgres migrate`); give
   * `postgresUnitOfWork` the same one, so the checkpoints it commits with a projection's writes are
   * the ones this store reads.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
}

/** A client or pool that can run one statement. */
type Queryable = Pick<pg.ClientBase, 'query'>;

/**
 * Raises a checkpoint to `offset` unless it is already as high, and returns the stored offset: one
 * upsert with `GREATEST`, so concurrent commits (the unit's, in a projection's transaction, and the
 * runner's own) never lower it. `updated_at` moves only when the offset does.
 */
export async function raiseCheckpoint(
  db: Queryable,
  tables: PostgresTables,
  at: { readonly projection: string; readonly topic: string; readonly partition: number },
  offset: number,
  nowMs: number,
): Promise<number> {
  const result = await db.query<{ offset: string }>(
    `INSERT INTO ${tables.checkpoints} AS c (projection, topic, partition, "offset", updated_at)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (projection, topic, partition) DO UPDATE SET
       "offset" = GREATEST(c."offset", EXCLUDED."offset"),
       updated_at = CASE WHEN EXCLUDED."offset" > c."offset" THEN EXCLUDED.updated_at ELSE c.updated_at END
     RETURNING "offset"`,
    [at.projection, at.topic, at.partition, offset, nowMs],
  );
  return Number(result.rows[0]?.offset ?? offset);
}

interface CheckpointRow {
  readonly projection: string;
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly updated_at: string;
}

/**
 * Keeps projection checkpoints in PostgreSQL, in the `checkpoints` table of Harrier's schema: the
 * same rows `postgresUnitOfWork` commits in a projection's own transaction, so a projection whose
 * read model lives in PostgreSQL applies each event exactly once.
 *
 * @remarks
 * One row per (projection, topic, partition). A commit is one upsert with `GREATEST`: it never
 * lowers a stored offset, so the ProjectionRunner's periodic commits (of offsets the unit already
 * committed) change nothing. The generation and rebuild marker of each projection live in the
 * `projection_generations` table: `beginRebuild` (and `reset`) raise the generation and remove the
 * checkpoints in one transaction, and a commit given a generation holds that row (shared) while it
 * raises the checkpoint, so a stale commit can never land after a rebuild. The store checks the
 * schema version on first use (`schema-outdated` naming the migrate command) and never migrates.
 *
 * Failures reject with a {@link HarrierError}: `postgres-unavailable` when the server cannot be
 * reached, `schema-outdated`, `store-closed` after {@link PostgresCheckpointStore.close},
 * `invalid-argument` for an offset that is not a whole number from 0.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const bus = createBus({
 *   endpoint: 'orders',
 *   eventLog,
 *   checkpoints: new PostgresCheckpointStore({ connection: pool }),
 *   unitOfWork: postgresUnitOfWork({ connection: pool }),
 *   handlers: [OrderTotals],
 * });
 * ```
 */
export class PostgresCheckpointStore implements CheckpointStore {
  readonly #connection: PostgresConnectionOptions;
  readonly #handle: PoolHandle;
  readonly #tables: PostgresTables;
  #ready: Promise<void> | undefined;
  #closed = false;

  /** @throws HarrierError `invalid-option` for a bad schema name. */
  constructor(options: PostgresCheckpointStoreOptions) {
    this.#tables = postgresTables(options.schema);
    this.#connection = options.connection;
    this.#handle = openPool(options.connection);
  }

  async get(projection: string, topic: string, partition: number): Promise<number | undefined> {
    const rows = await this.#query<{ offset: string }>(
      'reading a checkpoint',
      `SELECT "offset" FROM ${this.#tables.checkpoints} WHERE projection = $1 AND topic = $2 AND partition = $3`,
      [projection, topic, partition],
    );
    return rows[0] === undefined ? undefined : Number(rows[0].offset);
  }

  /**
   * @throws HarrierError `invalid-argument` when `offset` is not a whole number from 0,
   *   `projection-rebuilt` when `options.generation` is stale or a rebuild is under way.
   */
  async commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
    options?: CommitOptions,
  ): Promise<number> {
    checkCheckpointOffset(projection, topic, partition, offset);
    const at = { projection, topic, partition };
    const expected = options?.generation;
    if (expected === undefined) {
      return this.#use('committing a checkpoint', (pool) =>
        raiseCheckpoint(pool, this.#tables, at, offset, nowMs),
      );
    }
    return this.#transaction('committing a checkpoint', async (client) => {
      await holdGeneration(client, this.#tables, projection, expected);
      return raiseCheckpoint(client, this.#tables, at, offset, nowMs);
    });
  }

  /** @remarks Sorted by projection, topic (byte order) and partition. */
  async list(projection?: string): Promise<Checkpoint[]> {
    const rows = await this.#query<CheckpointRow>(
      'listing checkpoints',
      `SELECT projection, topic, partition, "offset", updated_at FROM ${this.#tables.checkpoints}
       ${projection === undefined ? '' : 'WHERE projection = $1'}
       ORDER BY projection COLLATE "C", topic COLLATE "C", partition`,
      projection === undefined ? [] : [projection],
    );
    return rows.map((row) => ({
      projection: row.projection,
      topic: row.topic,
      partition: row.partition,
      offset: Number(row.offset),
      updatedAt: Number(row.updated_at),
    }));
  }

  async reset(projection: string): Promise<void> {
    await this.beginRebuild(projection, `${REQUESTED_REBUILD_PREFIX}${randomUUID()}`, Date.now());
  }

  async generation(projection: string): Promise<ProjectionGeneration> {
    return this.#use('reading a projection generation', (pool) =>
      readGeneration(pool, this.#tables, projection),
    );
  }

  /** @remarks Sorted by projection (byte order); projections run in a unit of work show at generation 0. */
  async generations(): Promise<ProjectionGeneration[]> {
    return this.#use('listing projection generations', (pool) => readGenerations(pool, this.#tables));
  }

  async beginRebuild(
    projection: string,
    id: string,
    nowMs: number,
    replacing?: string,
  ): Promise<ProjectionGeneration | undefined> {
    return this.#transaction('beginning a rebuild', async (client) => {
      // The generation row first: the order every checkpoint writer locks in, so none deadlocks.
      const raised = await raiseGeneration(
        client,
        this.#tables,
        projection,
        { id, startedAt: nowMs },
        replacing,
      );
      if (raised !== undefined) await this.#removeCheckpoints(client, projection);
      return raised;
    });
  }

  async endRebuild(projection: string, id: string): Promise<boolean> {
    return this.#use('ending a rebuild', (pool) => clearRebuildMarker(pool, this.#tables, projection, id));
  }

  async #removeCheckpoints(client: pg.ClientBase, projection: string): Promise<void> {
    await client.query(`DELETE FROM ${this.#tables.checkpoints} WHERE projection = $1`, [projection]);
  }

  async lowest(topic: string, partition: number): Promise<number | undefined> {
    const rows = await this.#query<{ lowest: string | null }>(
      'reading the lowest checkpoint',
      `SELECT min("offset") AS lowest FROM ${this.#tables.checkpoints} WHERE topic = $1 AND partition = $2`,
      [topic, partition],
    );
    const lowest = rows[0]?.lowest;
    return lowest === null || lowest === undefined ? undefined : Number(lowest);
  }

  /** Ends the pool when the store opened it (a pool given as `connection` stays open). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#handle.end();
  }

  /** Runs `action` in a transaction of a client of the pool: committed when it resolves. */
  async #transaction<T>(doing: string, action: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.#use(doing, async (pool) => {
      // Held with an 'error' listener: a session the server ends while checked out must not crash.
      const held = await holdClient(pool);
      let broken: Error | undefined;
      try {
        await held.client.query('BEGIN');
        try {
          const result = await action(held.client);
          await held.client.query('COMMIT');
          return result;
        } catch (error) {
          await held.client.query('ROLLBACK').catch((rollbackError: unknown) => {
            broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
          });
          throw error;
        }
      } catch (error) {
        // A lost session is reported as such, whatever the statement made of it.
        throw held.lost ?? error;
      } finally {
        held.release(broken);
      }
    });
  }

  async #query<R extends pg.QueryResultRow>(doing: string, sql: string, values: unknown[]): Promise<R[]> {
    return this.#use(doing, async (pool) => (await pool.query<R>(sql, values)).rows);
  }

  async #use<T>(doing: string, action: (pool: pg.Pool) => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        `PostgresCheckpointStore was closed while ${doing}: make a new store`,
      );
    }
    try {
      this.#ready ??= requireSchema(this.#handle.pool, this.#tables, 'PostgresCheckpointStore').catch(
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
