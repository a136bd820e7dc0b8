/**
 * The tests' PostgreSQL: the global setup's server (DATABASE_URL, or one of its own), a pool per
 * test file, and a fresh schema per test so files and tests never see each other's rows.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll } from 'vitest';

/** A schema name no other test uses: `t_<random>`. */
export function freshSchema(): string {
  return `t_${randomBytes(6).toString('hex')}`;
}

/** A pool on the tests' PostgreSQL, ended after the file's tests. */
export function useSharedPostgres(url: string): { readonly pool: pg.Pool } {
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on('error', () => {});
  afterAll(async () => {
    await pool.end();
  });
  return { pool };
}

/** Drops a schema and everything in it. */
export async function dropSchema(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}
