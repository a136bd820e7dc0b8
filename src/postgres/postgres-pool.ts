import type pg from 'pg';
import { HarrierError } from '../errors/harrier-error.js';
import type { Logger } from '../logging/logger.js';
import { describePostgres, isPool, type PostgresConnectionOptions } from './postgres-connection.js';
import { pg as driver } from './postgres-peers.js';

/** A pool to use, and whether closing the part that opened it ends it. */
export interface PoolHandle {
  readonly pool: pg.Pool;
  /** True when the pool was created here (from a URL or options): {@link PoolHandle.end} ends it. */
  readonly owned: boolean;
  /** Ends the pool when it was created here; a shared pool stays open. */
  end(): Promise<void>;
}

/**
 * The pool of `connection`: the given one (shared), or a new one.
 * @param logger - where a new pool reports an idle connection the server ended
 *   @defaultValue none (the pool drops the connection silently)
 */
export function openPool(connection: PostgresConnectionOptions, logger?: Logger): PoolHandle {
  if (isPool(connection)) return { pool: connection, owned: false, end: async () => {} };
  const pool = new driver.Pool(
    typeof connection === 'string' ? { connectionString: connection } : connection,
  );
  // An idle client that loses its server emits on the pool; without a listener Node would crash.
  // The pool has dropped the client already and opens a new one when next asked.
  pool.on('error', (error: Error) => {
    logger?.warn(
      `An idle PostgreSQL connection to ${describePostgres(connection)} was lost; the pool opens a new one when needed`,
      { error: error.message },
    );
  });
  let ended: Promise<void> | undefined;
  return {
    pool,
    owned: true,
    end: () => (ended ??= pool.end()),
  };
}

/**
 * PostgreSQL error codes (SQLSTATE) of a server that cannot be reached, is shutting down, or has no
 * connection slot left (53300 too_many_connections: it passes once other sessions end).
 */
const UNAVAILABLE_SQLSTATES = new Set([
  '57P01',
  '57P02',
  '57P03',
  '08000',
  '08001',
  '08003',
  '08006',
  '53300',
]);
const UNAVAILABLE_ERRNOS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** True when `error` says the server is unreachable (rather than that a statement failed). */
export function isPostgresUnavailable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && (UNAVAILABLE_SQLSTATES.has(code) || UNAVAILABLE_ERRNOS.has(code)))
    return true;
  const message = error instanceof Error ? error.message : '';
  // "... is not queryable": a client whose connection was lost (or ended) before this statement.
  return /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect|is not queryable/i.test(
    message,
  );
}

/**
 * `error` as a HarrierError `postgres-unavailable` naming the connection when the server cannot be
 * reached; other errors unchanged.
 */
export function postgresError(error: unknown, connection: PostgresConnectionOptions, doing: string): unknown {
  if (!isPostgresUnavailable(error)) return error;
  const detail = error instanceof Error ? error.message : String(error);
  return new HarrierError(
    'postgres-unavailable',
    `Could not reach PostgreSQL at ${describePostgres(connection)} while ${doing} (${detail}): check that the server runs and the URL (DATABASE_URL or --database-url) is right`,
    { cause: error },
  );
}
