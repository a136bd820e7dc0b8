import { HarrierError } from '../errors/harrier-error.js';
import type * as PostgresLayerModule from './postgres-layer.js';

/** The PostgreSQL layer's classes and functions, as {@link loadPostgresLayer} loads them. */
export type PostgresLayer = typeof PostgresLayerModule;

let loading: Promise<PostgresLayer> | undefined;

async function load(): Promise<PostgresLayer> {
  try {
    await import('pg');
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    const missing =
      (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
      error instanceof Error &&
      error.message.includes(`'pg'`);
    if (!missing) throw error;
    throw new HarrierError(
      'missing-dependency',
      `Harrier's PostgreSQL layer (harrier/postgres and \`harrier postgres\` commands) needs pg, and it is not installed: npm install pg`,
      { cause: error },
    );
  }
  return await import('./postgres-layer.js');
}

/**
 * Loads the PostgreSQL layer once, after checking that its optional peer `pg` is installed.
 * @throws HarrierError `missing-dependency` naming `npm install pg` when pg is not installed.
 */
export function loadPostgresLayer(): Promise<PostgresLayer> {
  loading ??= load();
  return loading;
}
