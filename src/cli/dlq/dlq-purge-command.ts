import { createInterface } from 'node:readline';
import { SELECTOR_OPTIONS, contextOf, parse } from '../cli-context.js';
import { ExitCode, nothingMatched, usageError, writeJson, type CliIo } from '../cli-io.js';
import { help } from '../cli-args.js';
import { PURGE_HELP } from './dlq-help.js';
import { withDlqBackend } from './dlq-backend.js';
import { describeSelection, selectionOf } from './dlq-selection.js';

/** `harrier dlq purge`: deletes the selected dead letters, after asking. */
export async function purgeCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...SELECTOR_OPTIONS,
    all: { type: 'boolean' },
    yes: { type: 'boolean', short: 'y' },
  });
  if (values.help === true) return help(io, PURGE_HELP);
  const selection = selectionOf('purge', positionals, values, 'any', true);
  const yes = values.yes === true;
  if (!yes && io.stdin.isTTY !== true) {
    throw usageError(
      'Refusing to purge without confirmation: stdin is not a terminal, so pass --yes to delete the selected dead letters',
    );
  }
  const ctx = contextOf(io, values);
  return withDlqBackend(ctx, async ({ store }) => {
    const matched =
      selection.kind === 'ids'
        ? (await Promise.all(selection.ids.map((id) => store.get(id)))).filter((r) => r !== undefined).length
        : await store.count(selection.filter);
    if (matched === 0) {
      throw nothingMatched(`No dead letters match (${describeSelection(selection)}): nothing to purge`);
    }
    if (!yes) {
      const answer = await ask(
        io,
        `Delete ${matched} dead letter(s) (${describeSelection(selection)})? [y/N] `,
      );
      if (!/^y(es)?$/i.test(answer.trim())) {
        io.stderr.write('Nothing deleted.\n');
        return ExitCode.ok;
      }
    }
    const purged =
      selection.kind === 'ids' ? await store.remove(selection.ids) : await store.purge(selection.filter);
    if (ctx.json) writeJson(io.stdout, { purged });
    else io.stdout.write(`purged ${purged} dead letter(s)\n`);
    return ExitCode.ok;
  });
}

async function ask(io: CliIo, question: string): Promise<string> {
  io.stderr.write(question);
  const rl = createInterface({ input: io.stdin, terminal: false });
  try {
    for await (const line of rl) return line;
    return '';
  } finally {
    rl.close();
  }
}
