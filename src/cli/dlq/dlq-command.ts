import { usageError, ExitCode, type CliIo } from '../cli-io.js';
import { DLQ_HELP } from './dlq-help.js';
import { groupsCommand, listCommand, showCommand } from './dlq-inspect-commands.js';
import { purgeCommand } from './dlq-purge-command.js';
import { replayCommand } from './dlq-replay-command.js';
import { exportCommand, importCommand } from './dlq-transfer-commands.js';

/** Runs `harrier dlq ...`. */
export async function dlqCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'list':
      return listCommand(rest, io);
    case 'show':
      return showCommand(rest, io);
    case 'groups':
      return groupsCommand(rest, io);
    case 'replay':
      return replayCommand(rest, io);
    case 'purge':
      return purgeCommand(rest, io);
    case 'export':
      return exportCommand(rest, io);
    case 'import':
      return importCommand(rest, io);
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      io.stdout.write(DLQ_HELP);
      return sub === undefined ? ExitCode.usage : ExitCode.ok;
    default:
      throw usageError(`Unknown command "dlq ${sub}": run \`harrier dlq --help\` for the list`);
  }
}
