import type pg from 'pg';
import {
  projectionRebuiltError,
  type ProjectionGeneration,
  type RebuildMarker,
} from '../log/checkpoint-store.js';
import type { PostgresTables } from './postgres-schema.js';

/** A client or pool that can run one statement. */
type Queryable = Pick<pg.ClientBase, 'query'>;

interface GenerationRow {
  readonly projection: string;
  readonly generation: string;
  readonly rebuild_id: string | null;
  readonly rebuild_started_at: string | null;
}

const COLUMNS = 'projection, generation, rebuild_id, rebuild_started_at';

function decode(row: GenerationRow): ProjectionGeneration {
  const rebuild: RebuildMarker | undefined =
    row.rebuild_id === null ? undefined : { id: row.rebuild_id, startedAt: Number(row.rebuild_started_at) };
  return { projection: row.projection, generation: Number(row.generation), rebuild };
}

/**
 * Holds a projection's generation row with a share lock until the transaction ends, creating it
 * (generation 0) when missing, and rejects when it is not at `expected` or a rebuild is under way.
 *
 * @remarks
 * Call it inside a transaction before touching the projection's checkpoints: a rebuild updates the
 * row first (waiting for every transaction that holds it shared), then removes the checkpoints, so
 * a checkpoint raised under the lock is either removed by the rebuild or refused after it. The row
 * is created first so that there is always one to lock, even before the first rebuild.
 * @throws HarrierError `projection-rebuilt` naming the generation stored.
 */
export async function holdGeneration(
  client: Queryable,
  tables: PostgresTables,
  projection: string,
  expected: number,
): Promise<void> {
  await client.query(
    `INSERT INTO ${tables.projectionGenerations} (projection) VALUES ($1) ON CONFLICT DO NOTHING`,
    [projection],
  );
  const result = await client.query<GenerationRow>(
    `SELECT ${COLUMNS} FROM ${tables.projectionGenerations} WHERE projection = $1 FOR SHARE`,
    [projection],
  );
  const row = result.rows[0];
  const stored = row === undefined ? { generation: 0, rebuild: undefined } : decode(row);
  if (stored.generation !== expected || stored.rebuild !== undefined) {
    throw projectionRebuiltError(projection, expected, {
      generation: stored.generation,
      rebuilding: stored.rebuild !== undefined,
    });
  }
}

/** The projection's generation and marker (generation 0, no marker, when it has no row). */
export async function readGeneration(
  db: Queryable,
  tables: PostgresTables,
  projection: string,
): Promise<ProjectionGeneration> {
  const result = await db.query<GenerationRow>(
    `SELECT ${COLUMNS} FROM ${tables.projectionGenerations} WHERE projection = $1`,
    [projection],
  );
  const row = result.rows[0];
  return row === undefined ? { projection, generation: 0, rebuild: undefined } : decode(row);
}

/** Every projection's generation row, by name (byte order). */
export async function readGenerations(
  db: Queryable,
  tables: PostgresTables,
): Promise<ProjectionGeneration[]> {
  const result = await db.query<GenerationRow>(
    `SELECT ${COLUMNS} FROM ${tables.projectionGenerations} ORDER BY projection`,
  );
  return result.rows.map(decode);
}

/**
 * Raises the projection's generation and sets the rebuild marker; with `replacing`, only when the
 * marker stored is that rebuild's. Locks the row until the transaction ends: run it before removing
 * the checkpoints, in the same transaction.
 * @returns the new row; undefined when `replacing` did not match.
 */
export async function raiseGeneration(
  client: Queryable,
  tables: PostgresTables,
  projection: string,
  marker: RebuildMarker,
  replacing?: string,
): Promise<ProjectionGeneration | undefined> {
  const result =
    replacing === undefined
      ? await client.query<GenerationRow>(
          `INSERT INTO ${tables.projectionGenerations} AS g (${COLUMNS}) VALUES ($1, 1, $2, $3)
           ON CONFLICT (projection) DO UPDATE SET
             generation = g.generation + 1,
             rebuild_id = EXCLUDED.rebuild_id,
             rebuild_started_at = EXCLUDED.rebuild_started_at
           RETURNING ${COLUMNS}`,
          [projection, marker.id, marker.startedAt],
        )
      : await client.query<GenerationRow>(
          `UPDATE ${tables.projectionGenerations}
              SET generation = generation + 1, rebuild_id = $2, rebuild_started_at = $3
            WHERE projection = $1 AND rebuild_id = $4
            RETURNING ${COLUMNS}`,
          [projection, marker.id, marker.startedAt, replacing],
        );
  const row = result.rows[0];
  return row === undefined ? undefined : decode(row);
}

/** Clears the rebuild marker when it is rebuild `id`'s; returns whether it was. */
export async function clearRebuildMarker(
  db: Queryable,
  tables: PostgresTables,
  projection: string,
  id: string,
): Promise<boolean> {
  const result = await db.query(
    `UPDATE ${tables.projectionGenerations} SET rebuild_id = NULL, rebuild_started_at = NULL
      WHERE projection = $1 AND rebuild_id = $2`,
    [projection, id],
  );
  return (result.rowCount ?? 0) > 0;
}
