import type pg from 'pg';
import { HarrierError } from '../errors/harrier-error.js';

/** The oldest PostgreSQL Harrier's SQL runs on, as `server_version_num` reads it: 13.0. */
export const MIN_SERVER_VERSION_NUM = 130_000;

/**
 * The `unsupported-server` error for a server older than {@link MIN_SERVER_VERSION_NUM}; undefined
 * for one new enough.
 *
 * @remarks
 * PostgreSQL 13 is the first with everything Harrier's SQL uses: `gen_random_uuid()` without
 * pgcrypto (13), multi-column `mcv` statistics (12), `hashtextextended` (11).
 * @param versionNum - `current_setting('server_version_num')`, e.g. `'150020'`
 * @param version - `current_setting('server_version')`, for the message
 */
export function serverVersionError(versionNum: string, version: string): HarrierError | undefined {
  if (Number(versionNum) >= MIN_SERVER_VERSION_NUM) return undefined;
  return new HarrierError(
    'unsupported-server',
    `PostgreSQL ${version} is too old for Harrier, which needs PostgreSQL 13 or later: upgrade the server (or point DATABASE_URL at a newer one)`,
  );
}

/** @throws HarrierError `unsupported-server` when `client`'s server is older than PostgreSQL 13. */
export async function requireServerVersion(client: pg.ClientBase): Promise<void> {
  const result = await client.query<{ num: string; version: string }>(
    `SELECT current_setting('server_version_num') AS num, current_setting('server_version') AS version`,
  );
  const row = result.rows[0];
  const error = row === undefined ? undefined : serverVersionError(row.num, row.version);
  if (error !== undefined) throw error;
}
