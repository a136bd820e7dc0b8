/**
 * How the PostgreSQL orders examples (postgres-main.ts, postgres-only-main.ts) open their database:
 * DATABASE_URL and ORDERS_EXAMPLE_SCHEMA read and checked, a pool that can reach the server, and
 * the example's own schema dropped, migrated and given the app's tables, so each run starts from
 * scratch. Exits 2 with a message naming the fix when PostgreSQL cannot be reached or the schema is
 * not the example's.
 */
import pg from 'pg';
import { describePostgresUrl, migratePostgres } from '../../src/postgres/index.js';
import { ordersTablesSql } from './postgres-read-model.js';

const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** Which example opens the database. */
export interface ExampleDatabaseOptions {
  /** The npm script that runs the example (`example:postgres`), named in the fix. */
  readonly script: string;
  /** The schema when ORDERS_EXAMPLE_SCHEMA is not set. */
  readonly defaultSchema: string;
  /** The pool's most connections. */
  readonly maxConnections: number;
}

/** Opens the example's pool and prepares its schema, or exits 2 saying what to set. */
export async function openExampleDatabase(
  options: ExampleDatabaseOptions,
): Promise<{ readonly pool: pg.Pool; readonly schema: string; readonly url: string }> {
  const url = process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL;
  const schema = process.env.ORDERS_EXAMPLE_SCHEMA ?? options.defaultSchema;
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) {
    process.stderr.write(
      `ORDERS_EXAMPLE_SCHEMA is "${schema}": use a plain lower-case name (letters, digits, _), e.g. ${options.defaultSchema}\n`,
    );
    process.exit(2);
  }

  const pool = new pg.Pool({ connectionString: url, max: options.maxConnections });
  pool.on('error', () => {});
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    process.stderr.write(
      `Cannot connect to PostgreSQL at ${describePostgresUrl(url)} (${messageOf(error)}).\n` +
        `Set DATABASE_URL to a server you can use, e.g. DATABASE_URL=${DEFAULT_DATABASE_URL} npm run ${options.script}\n` +
        '(docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16 starts one).\n',
    );
    await pool.end();
    process.exit(2);
  }

  // The schema is the example's own: start from scratch, then migrate it and add the app's tables.
  // A schema that exists without the example's table belongs to someone else: refuse to drop it.
  const { rows: found } = await pool.query<{ schema: boolean; ours: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS schema,
          to_regclass(format('%I.order_summaries', $1::text)) IS NOT NULL AS ours`,
    [schema],
  );
  if (found[0]?.schema === true && !found[0].ours) {
    process.stderr.write(
      `Schema "${schema}" exists and is not the example's (no order_summaries table); the example drops its schema on every run, so it will not touch this one. Set ORDERS_EXAMPLE_SCHEMA to another name.\n`,
    );
    await pool.end();
    process.exit(2);
  }
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await migratePostgres(pool, { schema });
  await pool.query(ordersTablesSql(schema));
  return { pool, schema, url };
}
