import { afterEach, describe, expect, inject, it } from 'vitest';
import { runCli } from '../helpers/cli-in-process.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { migratePostgres, requireSchema } from '../../src/postgres/migrate-postgres.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../src/postgres/migrations.js';
import { postgresTables } from '../../src/postgres/postgres-schema.js';
import { freePort } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

async function tablesOf(schema: string): Promise<string[]> {
  const result = await pool.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name`,
    [schema],
  );
  return result.rows.map((row) => row.table_name);
}

const harrier = (args: readonly string[], env: Record<string, string> = {}) => runCli(args, { env });

describe('migratePostgres', () => {
  let schema = freshSchema();
  afterEach(async () => {
    await dropSchema(pool, schema);
    schema = freshSchema();
  });

  it('creates the schema and every table, and records each step', async () => {
    const report = await migratePostgres(databaseUrl, { schema });
    expect(report).toEqual({
      schema,
      from: 0,
      to: SCHEMA_VERSION,
      applied: MIGRATIONS.map((m) => ({ version: m.version, name: m.name })),
    });
    expect(await tablesOf(schema)).toEqual([
      'checkpoints',
      'dead_letters',
      'dedupe',
      'inbox',
      'ledger_claims',
      'ledger_copies',
      'ledger_losses',
      'migrations',
      'outbox',
      'outbox_parked',
      'projection_generations',
      'queue',
      'routes',
      'sagas',
      'schedules',
    ]);
  });

  it('gives the sagas table a state_version column, an integer of 1 for rows stored before it (step 7)', async () => {
    await migratePostgres(databaseUrl, { schema });
    const column = await pool.query<{ data_type: string; is_nullable: string; column_default: string }>(
      `SELECT data_type, is_nullable, column_default FROM information_schema.columns
       WHERE table_schema = $1 AND table_name = 'sagas' AND column_name = 'state_version'`,
      [schema],
    );
    expect(column.rows).toEqual([{ data_type: 'integer', is_nullable: 'NO', column_default: '1' }]);
    expect(MIGRATIONS.find((m) => m.version === 7)?.name).toBe('saga state version');
  });

  it('applies nothing the second time', async () => {
    await migratePostgres(databaseUrl, { schema });
    const again = await migratePostgres(pool, { schema });
    expect(again).toEqual({ schema, from: SCHEMA_VERSION, to: SCHEMA_VERSION, applied: [] });
  });

  it('applies each step once when several processes migrate at the same time', async () => {
    const reports = await Promise.all([1, 2, 3, 4].map(() => migratePostgres(databaseUrl, { schema })));
    expect(reports.filter((r) => r.applied.length > 0)).toHaveLength(1);
    const rows = await pool.query(`SELECT version FROM "${schema}".migrations`);
    expect(rows.rowCount).toBe(MIGRATIONS.length);
  });

  describe("when the schema already holds an application's own table of a Harrier name", () => {
    it('refuses with schema-conflict naming each such table and the --schema fix, changing nothing', async () => {
      await pool.query(`CREATE SCHEMA "${schema}"`);
      // As TypeORM and many apps name them.
      await pool.query(
        `CREATE TABLE "${schema}".migrations (id serial PRIMARY KEY, "timestamp" bigint NOT NULL, name varchar NOT NULL)`,
      );
      await pool.query(`CREATE TABLE "${schema}".outbox (id serial PRIMARY KEY, payload jsonb NOT NULL)`);
      const error = await migratePostgres(databaseUrl, { schema }).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'schema-conflict')).toBe(true);
      const message = (error as Error).message;
      expect(message).toContain(`schema "${schema}"`);
      expect(message).toContain('"migrations" (no version or applied_at column)');
      expect(message).toContain('"outbox"');
      expect(message).toContain('--schema harrier');
      expect(await tablesOf(schema)).toEqual(['migrations', 'outbox']);
    });

    it('names the one table that clashes when Harrier has not migrated the schema before', async () => {
      await pool.query(`CREATE SCHEMA "${schema}"`);
      await pool.query(`CREATE TABLE "${schema}".outbox (id serial PRIMARY KEY, payload jsonb NOT NULL)`);
      const error = await migratePostgres(pool, { schema }).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'schema-conflict')).toBe(true);
      expect((error as Error).message).toContain('a table "outbox" that Harrier did not create');
      expect((error as Error).message).not.toContain('"migrations"');
      expect(await tablesOf(schema)).toEqual(['outbox']);
    });
  });

  it('leaves a shared pool open', async () => {
    await migratePostgres(pool, { schema });
    expect((await pool.query('SELECT 1 AS one')).rows[0]).toEqual({ one: 1 });
  });

  it('refuses a schema name that is not a plain identifier, naming the rule', async () => {
    const error = await migratePostgres(databaseUrl, { schema: 'Harrier"; DROP TABLE x; --' }).catch(
      (e: unknown) => e,
    );
    expect(HarrierError.is(error, 'invalid-option')).toBe(true);
    expect((error as Error).message).toMatch(/lower-case letters, digits and _/);
  });

  it('says postgres-unavailable, without the password, when the server cannot be reached', async () => {
    const port = await freePort();
    const error = await migratePostgres(`postgres://app:s3cret@127.0.0.1:${port}/app`, { schema }).catch(
      (e: unknown) => e,
    );
    expect(HarrierError.is(error, 'postgres-unavailable')).toBe(true);
    expect((error as Error).message).toContain(`127.0.0.1:${port}`);
    expect((error as Error).message).not.toContain('s3cret');
  });
});

describe('requireSchema', () => {
  const schema = freshSchema();
  afterEach(async () => {
    await dropSchema(pool, schema);
  });

  it('refuses a schema without Harrier tables with schema-outdated, naming the migrate command', async () => {
    const error = await requireSchema(pool, postgresTables(schema), 'PostgresOutbox').catch(
      (e: unknown) => e,
    );
    expect(HarrierError.is(error, 'schema-outdated')).toBe(true);
    expect((error as Error).message).toContain(`harrier postgres migrate --schema ${schema}`);
  });

  it('accepts a migrated schema', async () => {
    await migratePostgres(pool, { schema });
    await expect(requireSchema(pool, postgresTables(schema), 'PostgresOutbox')).resolves.toBeUndefined();
  });
});

describe('harrier postgres migrate', () => {
  const schema = freshSchema();
  afterEach(async () => {
    await dropSchema(pool, schema);
  });

  it('migrates with --json and exits 0, then reports nothing to apply', async () => {
    const first = await harrier(['postgres', 'migrate', '--schema', schema, '--json'], {
      DATABASE_URL: databaseUrl,
    });
    expect(first.code).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject({ schema, from: 0, to: SCHEMA_VERSION });
    const second = await harrier(['postgres', 'migrate', '--schema', schema, '--database-url', databaseUrl]);
    expect(second.code).toBe(0);
    expect(JSON.parse(second.stdout)).toMatchObject({ applied: [] });
  });

  it('exits 2 naming DATABASE_URL when no database is given', async () => {
    const result = await harrier(['postgres', 'migrate']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('DATABASE_URL');
  });

  it('exits 2 for a bad schema name', async () => {
    const result = await harrier([
      'postgres',
      'migrate',
      '--schema',
      'Bad-Name',
      '--database-url',
      databaseUrl,
    ]);
    expect(result.code).toBe(2);
  });

  it("exits 5 naming the table when the schema holds the application's own migrations table", async () => {
    await pool.query(`CREATE SCHEMA "${schema}"`);
    await pool.query(
      `CREATE TABLE "${schema}".migrations (id serial PRIMARY KEY, name text NOT NULL, run_on timestamp)`,
    );
    const text = await harrier(['postgres', 'migrate', '--schema', schema, '--database-url', databaseUrl]);
    expect(text.code).toBe(5);
    expect(text.stderr).toMatch(
      /^harrier: PostgreSQL schema "t_[0-9a-f]+" already holds a table "migrations"/,
    );
    expect(text.stderr).toContain('--schema harrier');
    const json = await harrier(['postgres', 'migrate', '--schema', schema, '--json'], {
      DATABASE_URL: databaseUrl,
    });
    expect(json.code).toBe(5);
    expect(JSON.parse(json.stdout)).toEqual({
      schema,
      error: { code: 'schema-conflict', message: expect.stringContaining('"migrations"') as unknown },
    });
  });

  it('exits 3 when PostgreSQL cannot be reached', async () => {
    const port = await freePort();
    const result = await harrier(['postgres', 'migrate', '--database-url', `postgres://127.0.0.1:${port}/x`]);
    expect(result.code).toBe(3);
    expect(result.stderr).toContain('Could not reach PostgreSQL');
  });
});
