import type * as PostgresLayerModule from './postgres-layer.js';

/** The PostgreSQL layer's classes and functions, as {@link loadPostgresLayer} loads them. */
export type PostgresLayer = typeof PostgresLayerModule;

let loading: Promise<PostgresLayer> | undefined;

/**
 * Loads the PostgreSQL layer once, on first call, so the CLI loads pg only for a command that needs
 * it. The layer checks its peer as it loads (postgres-peers.ts).
 * @throws HarrierError `missing-dependency` naming `npm install pg` when pg is not installed.
 */
export function loadPostgresLayer(): Promise<PostgresLayer> {
  loading ??= import('./postgres-layer.js');
  return loading;
}
