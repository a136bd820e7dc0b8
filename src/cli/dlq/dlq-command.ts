import { runSubcommand, type CliIo } from '../cli-io.js';
import { DLQ_HELP } from './dlq-help.js';
import { groupsCommand, listCommand, showCommand } from './dlq-inspect-commands.js';
import { purgeCommand } from './dlq-purge-command.js';
import { replayCommand } from './dlq-replay-command.js';
import { exportCommand, importCommand } from './dlq-transfer-commands.js';

/** Runs `harrier dlq ...`. */
export function dlqCommand(argv: readonly string[], io: CliIo): Promise<number> {
  return runSubcommand(
    'dlq',
    DLQ_HELP,
    {
      list: listCommand,
      show: showCommand,
      groups: groupsCommand,
      replay: replayCommand,
      purge: purgeCommand,
      export: exportCommand,
      import: importCommand,
    },
    argv,
    io,
  );
}
