import { parseArgs } from 'node:util';
import { HarrierError } from '../errors/harrier-error.js';
import { loadPostgresLayer } from '../postgres/load-postgres-layer.js';
import { help } from './cli-args.js';
import {
  databaseUrlOf,
  POSTGRES_CONNECTION_HELP,
  POSTGRES_CONNECTION_OPTIONS,
  schemaOf,
} from './database-url.js';
import { outboxCommand } from './postgres-outbox-commands.js';
import { ExitCode, runSubcommand, usageError, writeJson, type CliIo } from './cli-io.js';

/** Help of `harrier postgres`. */
export const POSTGRES_HELP = `Usage: harrier postgres <command> [options]

Commands:
  migrate            create or upgrade Harrier's tables (outbox, inbox, checkpoints, sagas,
                     queue, routes, dedupe, dead_letters, outbox_parked,
                     projection_generations, schedules)
  outbox parked      list the outbox rows the relay parked (see also show, replay, delete)

${POSTGRES_CONNECTION_HELP}
`;

const MIGRATE_HELP = `Usage: harrier postgres migrate [--database-url URL] [--schema NAME] [--json]

Creates the schema and Harrier's tables in it, or applies the steps a newer Harrier added, in one
transaction (concurrent runs wait for each other). Harrier never migrates at start-up: run this in a
deploy step. Prints the version before and after and each step applied; running it again applies
nothing. Exit codes: 0 ok, 2 usage error, 3 PostgreSQL unreachable, 5 the schema already holds a
table of one of Harrier's names that Harrier did not create (the app's own migrations or outbox):
pass another --schema. With --json a failure is a JSON line too: {"schema", "error": {code, message}}.

${POSTGRES_CONNECTION_HELP}
`;

const OPTIONS = POSTGRES_CONNECTION_OPTIONS;

/** Runs `harrier postgres ...`. */
export function postgresCommand(argv: readonly string[], io: CliIo): Promise<number> {
  return runSubcommand(
    'postgres',
    POSTGRES_HELP,
    { migrate: migrateCommand, outbox: outboxCommand },
    argv,
    io,
  );
}

async function migrateCommand(argv: readonly string[], io: CliIo): Promise<number> {
  let values: { 'database-url'?: string; schema?: string; json?: boolean; help?: boolean };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: [...argv],
      options: OPTIONS,
      allowPositionals: true,
      strict: true,
    }));
  } catch (error) {
    throw usageError(`${error instanceof Error ? error.message : String(error)}; see --help`);
  }
  if (values.help === true) return help(io, MIGRATE_HELP);
  if (positionals.length > 0) {
    throw usageError(`\`postgres migrate\` takes no arguments, got "${positionals.join(' ')}"; see --help`);
  }
  const url = databaseUrlOf(values['database-url'], io);
  const json = values.json ?? io.stdout.isTTY !== true;
  const { migratePostgres } = await loadPostgresLayer();
  let report;
  try {
    const schema = schemaOf(values.schema, io.env);
    report = await migratePostgres(url, schema === undefined ? {} : { schema });
  } catch (error) {
    // A script reading --json gets a line for a failure too; stderr and the exit code are as always.
    if (json && HarrierError.is(error)) {
      writeJson(io.stdout, {
        schema: values.schema ?? 'harrier',
        error: { code: error.code, message: error.message },
      });
    }
    throw error;
  }
  if (json) {
    writeJson(io.stdout, report);
  } else if (report.applied.length === 0) {
    io.stdout.write(`Schema "${report.schema}" is up to date (version ${report.to}).\n`);
  } else {
    for (const step of report.applied) io.stdout.write(`applied ${step.version}: ${step.name}\n`);
    io.stdout.write(`Schema "${report.schema}" migrated from version ${report.from} to ${report.to}.\n`);
  }
  return ExitCode.ok;
}
