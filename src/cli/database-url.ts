import { describePostgresUrl } from '../postgres/postgres-connection.js';
import { usageError, type CliIo } from './cli-io.js';

/**
 * The PostgreSQL of a `harrier postgres` command: `--database-url`, else `$DATABASE_URL`.
 * @throws CliExit (usage) when neither is given, or the URL is not a postgres:// one.
 */
export function databaseUrlOf(given: string | undefined, io: CliIo): string {
  const url = given ?? io.env.DATABASE_URL;
  if (url === undefined || url === '') {
    throw usageError(
      'No PostgreSQL to connect to: set DATABASE_URL or pass --database-url postgres://user@host:5432/database',
    );
  }
  if (!/^postgres(ql)?:\/\//.test(url)) {
    throw usageError(
      `${given === undefined ? 'DATABASE_URL' : '--database-url'} "${describePostgresUrl(url)}" is not a postgres:// URL, e.g. postgres://user@host:5432/database`,
    );
  }
  return url;
}

/** The schema a `harrier postgres` command works on: `--schema`, else `$HARRIER_SCHEMA`; undefined for the default. */
export function schemaOf(flag: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  return flag ?? (env.HARRIER_SCHEMA === '' ? undefined : env.HARRIER_SCHEMA);
}

/** Help of the connection and output options of every `harrier postgres` command. */
export const POSTGRES_CONNECTION_HELP = `Connection and output:
  --database-url <url>  PostgreSQL to use (default: $DATABASE_URL), e.g. postgres://user:pass@host:5432/app
  --schema <name>       schema of Harrier's tables (default: $HARRIER_SCHEMA, else harrier)
  --json                JSON lines on stdout (the default when stdout is not a terminal)
  -h, --help            show this help`;

/** The connection and output options of every `harrier postgres` command. */
export const POSTGRES_CONNECTION_OPTIONS = {
  'database-url': { type: 'string' },
  schema: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;
