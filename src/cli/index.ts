import { GLOBAL_HELP, exitOf } from './cli-context.js';
import { ExitCode, type CliIo } from './cli-io.js';
import { dashboardCommand } from './dashboard-command.js';
import { dlqCommand } from './dlq/index.js';
import { postgresCommand } from './postgres-commands.js';
import { projectionsCommand } from './projections-commands.js';
import { sagasCommand } from './sagas-commands.js';
import { schedulesCommand } from './schedules-commands.js';
import { topologyCommand } from './topology-command.js';

export { ExitCode } from './cli-io.js';
export type { CliIo, CliOutput } from './cli-io.js';

const HELP = `Usage: harrier <command> [options]

Operate a Harrier system, on the backend its URL's scheme picks: dead letters (also as a web
page), projections, sagas, recurring schedules, topology; and Harrier's tables in PostgreSQL.

Commands:
  dlq list | show | groups | replay | purge | export | import
  projections status | rebuild
  sagas list | show
  schedules list | show | cancel
  topology
  dashboard
  postgres migrate | outbox parked | outbox show | outbox replay | outbox delete

Run \`harrier <command> --help\` for a command's options.

${GLOBAL_HELP}

Exit codes: 0 ok, 1 some items failed, 2 usage error, 3 the backend unreachable, 4 nothing matched,
5 the PostgreSQL schema holds tables of Harrier's names that are not Harrier's (postgres migrate).
`;

function defaultIo(): CliIo {
  return { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env };
}

/**
 * Runs the `harrier` command line and resolves with its exit code; never rejects.
 *
 * @remarks
 * The `harrier` bin calls this with `process.argv.slice(2)`; tests and tools can call it directly
 * with their own streams. Exit codes: 0 ok, 1 some items failed, 2 usage error, 3 the backend
 * (Redis, PostgreSQL) unreachable, 4 nothing matched, 5 a PostgreSQL schema conflict
 * ({@link ExitCode}).
 *
 * @example
 * ```ts
 * import { run } from 'harrier/cli';
 * const code = await run(['dlq', 'list', '--json', '--url', 'redis://127.0.0.1:6379']);
 * ```
 */
export async function run(argv: readonly string[], io: CliIo = defaultIo()): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'dlq':
        return await dlqCommand(rest, io);
      case 'projections':
        return await projectionsCommand(rest, io);
      case 'sagas':
        return await sagasCommand(rest, io);
      case 'schedules':
        return await schedulesCommand(rest, io);
      case 'postgres':
        return await postgresCommand(rest, io);
      case 'topology':
        return await topologyCommand(rest, io);
      case 'dashboard':
        return await dashboardCommand(rest, io);
      case undefined:
        io.stderr.write(HELP);
        return ExitCode.usage;
      case '--help':
      case '-h':
      case 'help':
        io.stdout.write(HELP);
        return ExitCode.ok;
      default:
        io.stderr.write(`harrier: unknown command "${command}"; run \`harrier --help\` for the list\n`);
        return ExitCode.usage;
    }
  } catch (error) {
    const exit = exitOf(error);
    io.stderr.write(`harrier: ${exit.message}\n`);
    return exit.exitCode;
  }
}
