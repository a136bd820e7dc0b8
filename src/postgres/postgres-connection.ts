/**
 * Where PostgreSQL is, as every part of the PostgreSQL layer takes it, and how a connection is named
 * in messages. Types only from pg: this module loads without pg installed.
 */
import type { Pool, PoolConfig } from 'pg';

/**
 * Where PostgreSQL is, for the outbox, the relay, the inbox, the stores and the migration: the one
 * connection type of the PostgreSQL layer.
 *
 * - a `postgres://` URL: the part creates a `pg.Pool` of its own and ends it on close;
 * - a `pg.Pool` to share (the application's own, so its transactions and Harrier's rows meet): the
 *   part never ends it;
 * - `pg.Pool` options (`{ host, port, user, password, database, max, ... }`): the part creates its
 *   own pool.
 */
export type PostgresConnectionOptions = string | Pool | PoolConfig;

/** True when `connection` is a pg `Pool` (rather than where to create one). */
export function isPool(connection: PostgresConnectionOptions): connection is Pool {
  // Checked by shape, not `instanceof`: the application's copy of pg may not be this module's.
  return (
    typeof connection === 'object' &&
    typeof (connection as { connect?: unknown }).connect === 'function' &&
    typeof (connection as { query?: unknown }).query === 'function' &&
    typeof (connection as { totalCount?: unknown }).totalCount === 'number'
  );
}

/** A postgres:// URL with its password hidden, for messages. */
export function describePostgresUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'an unparsable PostgreSQL URL';
  }
}

/** A connection, for messages: never a password. */
export function describePostgres(connection: PostgresConnectionOptions): string {
  if (typeof connection === 'string') return describePostgresUrl(connection);
  if (isPool(connection)) return 'the given pg Pool';
  if (typeof connection.connectionString === 'string')
    return describePostgresUrl(connection.connectionString);
  const host = typeof connection.host === 'string' ? connection.host : 'localhost';
  return `postgres://${host}:${connection.port ?? 5432}/${connection.database ?? ''}`;
}
