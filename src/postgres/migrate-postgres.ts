import type pg from 'pg';
import { HarrierError } from '../errors/harrier-error.js';
import { foreignTables, type ForeignTable } from './foreign-tables.js';
import { holdClient } from './held-client.js';
import { MIGRATIONS, SCHEMA_VERSION } from './migrations.js';
import type { PostgresConnectionOptions } from './postgres-connection.js';
import { openPool, postgresError } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';
import { requireServerVersion } from './server-version.js';

/** Options of {@link migratePostgres}. */
export interface MigratePostgresOptions {
  /**
   * The schema Harrier's tables live in (created when missing).
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
}

/** What {@link migratePostgres} did. */
export interface MigrationReport {
  readonly schema: string;
  /** The version before the call (0: no Harrier tables). */
  readonly from: number;
  /** The version after it: this copy of Harrier's {@link SCHEMA_VERSION}. */
  readonly to: number;
  /** The steps applied by this call, oldest first; empty when the schema was up to date. */
  readonly applied: readonly { readonly version: number; readonly name: string }[];
}

/** The version recorded in `tables.migrations`, 0 when the schema or the table is missing. */
async function currentVersion(client: pg.ClientBase, tables: PostgresTables): Promise<number> {
  const exists = await client.query<{ present: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS present`, [
    `${tables.quotedSchema}.migrations`,
  ]);
  if (exists.rows[0]?.present !== true) return 0;
  const result = await client.query<{ version: number | null }>(
    `SELECT max(version) AS version FROM ${tables.migrations}`,
  );
  return result.rows[0]?.version ?? 0;
}

/** The `schema-conflict` error for the tables of `schema` Harrier would take for its own. */
function schemaConflict(schema: string, foreign: readonly ForeignTable[]): HarrierError {
  const named = foreign.map((table) =>
    table.missingColumns === undefined
      ? `"${table.name}"`
      : `"${table.name}" (no ${table.missingColumns.join(' or ')} column)`,
  );
  const held =
    named.length === 1
      ? `a table ${named[0] ?? ''} that Harrier did not create`
      : `tables that Harrier did not create: ${named.join(', ')}`;
  const other = schema === 'harrier' ? 'harrier_bus' : 'harrier';
  return new HarrierError(
    'schema-conflict',
    `PostgreSQL schema "${schema}" already holds ${held}. Harrier keeps its tables (migrations, outbox, inbox, checkpoints, sagas, queue, routes, dedupe, dead_letters, outbox_parked) in a schema of their own: migrate another one, e.g. \`harrier postgres migrate --schema ${other}\` or migratePostgres(connection, { schema: '${other}' }), and give every harrier/postgres part the same schema option. Nothing was changed`,
  );
}

/**
 * Creates or upgrades Harrier's tables (outbox, inbox, checkpoints, sagas, dead_letters) in `schema`: every step
 * not applied yet, in one transaction, under a lock so concurrent calls apply each step once.
 *
 * @remarks
 * Nothing in Harrier migrates at start-up: call this from a deploy step, or run `harrier postgres
 * migrate`. The parts check the version when they start and refuse a schema that is behind with
 * `schema-outdated`. See docs/postgres.md.
 * @throws HarrierError `invalid-option` for a bad schema name, `postgres-unavailable` when the
 * server cannot be reached, `schema-conflict` (changing nothing) when the schema already holds a
 * table of one of Harrier's names that Harrier did not create, e.g. the application's own
 * `migrations` or `outbox`; `unsupported-server` (changing nothing) on a PostgreSQL older than 13.
 */
export async function migratePostgres(
  connection: PostgresConnectionOptions,
  options: MigratePostgresOptions = {},
): Promise<MigrationReport> {
  const tables = postgresTables(options.schema);
  const handle = openPool(connection);
  try {
    const held = await holdClient(handle.pool);
    const { client } = held;
    try {
      await client.query('BEGIN');
      try {
        await requireServerVersion(client);
        await client.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [
          `harrier-migrate:${tables.schema}`,
        ]);
        const foreign = await foreignTables(client, tables);
        if (foreign.length > 0) throw schemaConflict(tables.schema, foreign);
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${tables.quotedSchema}`);
        await client.query(
          `CREATE TABLE IF NOT EXISTS ${tables.migrations} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
        );
        const from = await currentVersion(client, tables);
        const applied: { version: number; name: string }[] = [];
        for (const step of MIGRATIONS) {
          if (step.version <= from) continue;
          await client.query(step.sql(tables));
          await client.query(`INSERT INTO ${tables.migrations} (version, name) VALUES ($1, $2)`, [
            step.version,
            step.name,
          ]);
          applied.push({ version: step.version, name: step.name });
        }
        await client.query('COMMIT');
        return { schema: tables.schema, from, to: Math.max(from, SCHEMA_VERSION), applied };
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      }
    } finally {
      held.release();
    }
  } catch (error) {
    throw postgresError(error, connection, `migrating schema "${tables.schema}"`);
  } finally {
    await handle.end();
  }
}

/**
 * Checks that `tables` are at this copy's {@link SCHEMA_VERSION}; every part calls it when it starts.
 * @throws HarrierError `schema-outdated` naming the migrate command when they are missing or behind,
 *   `unsupported-server` on a PostgreSQL older than 13.
 */
export async function requireSchema(pool: pg.Pool, tables: PostgresTables, part: string): Promise<void> {
  const held = await holdClient(pool);
  let version: number;
  try {
    await requireServerVersion(held.client);
    version = await currentVersion(held.client, tables);
  } finally {
    held.release();
  }
  if (version < SCHEMA_VERSION) {
    throw new HarrierError(
      'schema-outdated',
      `${part} needs Harrier's PostgreSQL schema "${tables.schema}" at version ${SCHEMA_VERSION}, and it is at ${version}${version === 0 ? ' (no Harrier tables)' : ''}: run \`harrier postgres migrate --schema ${tables.schema}\` or await migratePostgres(connection, { schema: '${tables.schema}' }) in a deploy step (Harrier never migrates at start-up)`,
    );
  }
}
