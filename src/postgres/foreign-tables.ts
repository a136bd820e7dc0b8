import type pg from 'pg';
import { MIGRATIONS } from './migrations.js';
import type { PostgresTables } from './postgres-schema.js';

/** The columns of Harrier's `migrations` table: a table of that name without them is not Harrier's. */
const MIGRATIONS_COLUMNS = ['version', 'name', 'applied_at'] as const;

/** A table in the schema that has one of Harrier's names and that Harrier did not create. */
export interface ForeignTable {
  readonly name: string;
  /** For `migrations`: the columns of Harrier's table it lacks. */
  readonly missingColumns?: readonly string[];
}

/**
 * The tables (or views) of `tables.schema` that Harrier's pending steps would take for its own:
 * a `migrations` table without Harrier's columns, and every table a step not applied yet creates
 * that exists already.
 *
 * @remarks
 * Harrier creates a step's tables in the transaction that records the step, so a table of a pending
 * step that exists is the application's (`CREATE TABLE IF NOT EXISTS` would keep it, and the step
 * would then fail on a column it lacks, or, worse, use it).
 */
export async function foreignTables(client: pg.ClientBase, tables: PostgresTables): Promise<ForeignTable[]> {
  const names = ['migrations', ...new Set(MIGRATIONS.flatMap((step) => step.tables))];
  const found = await client.query<{ name: string; columns: string[] }>(
    `SELECT c.relname AS name, coalesce(array_agg(a.attname::text) FILTER (WHERE a.attname IS NOT NULL), '{}') AS columns
       FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE n.nspname = $1 AND c.relname = ANY($2::text[])
      GROUP BY c.relname`,
    [tables.schema, names],
  );
  const columnsOf = new Map(found.rows.map((row) => [row.name, new Set(row.columns)]));
  const foreign: ForeignTable[] = [];
  let from = 0;
  const migrations = columnsOf.get('migrations');
  if (migrations !== undefined) {
    const missingColumns = MIGRATIONS_COLUMNS.filter((column) => !migrations.has(column));
    if (missingColumns.length > 0) foreign.push({ name: 'migrations', missingColumns });
    else {
      const result = await client.query<{ version: number | null }>(
        `SELECT max(version) AS version FROM ${tables.migrations}`,
      );
      from = result.rows[0]?.version ?? 0;
    }
  }
  for (const step of MIGRATIONS) {
    if (step.version <= from) continue;
    for (const name of step.tables) {
      if (columnsOf.has(name) && !foreign.some((table) => table.name === name)) foreign.push({ name });
    }
  }
  return foreign;
}
