import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { DeadLetterRecord } from '../../dead-letters/dead-letter-store.js';
import { parseDeadLetterRecord } from '../../dead-letters/parse-dead-letter-record.js';
import { SELECTOR_OPTIONS, contextOf, noPositionals, parse } from '../cli-context.js';
import { ExitCode, nothingMatched, writeJson, type CliIo } from '../cli-io.js';
import { help } from '../cli-args.js';
import { EXPORT_HELP, IMPORT_HELP } from './dlq-help.js';
import { withDlqBackend } from './dlq-backend.js';
import { allMatching, describeSelection, selectRecords, selectionOf } from './dlq-selection.js';

/** `harrier dlq export`: the selected dead letters as JSON lines. */
export async function exportCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...SELECTOR_OPTIONS,
    all: { type: 'boolean' },
    out: { type: 'string' },
  });
  if (values.help === true) return help(io, EXPORT_HELP);
  const selection = selectionOf('export', positionals, values, 'any', false);
  const ctx = contextOf(io, values);
  return withDlqBackend(ctx, async ({ store }) => {
    const file = values.out === undefined ? undefined : await open(values.out, 'w');
    let exported = 0;
    try {
      const write = async (records: readonly DeadLetterRecord[]): Promise<void> => {
        const text = records.map((r) => `${JSON.stringify(r)}\n`).join('');
        exported += records.length;
        if (file !== undefined) await file.write(text);
        else io.stdout.write(text);
      };
      if (selection.kind === 'ids') {
        const records = await selectRecords(store, selection);
        await write(records.filter((r): r is DeadLetterRecord => r !== undefined));
      } else {
        for await (const records of allMatching(store, selection.filter)) await write(records);
      }
    } finally {
      await file?.close();
    }
    if (exported === 0) {
      throw nothingMatched(`No dead letters match (${describeSelection(selection)}): nothing exported`);
    }
    if (values.out !== undefined) {
      if (ctx.json) writeJson(io.stdout, { exported, out: values.out });
      else io.stdout.write(`exported ${exported} dead letter(s) to ${values.out}\n`);
    } else {
      io.stderr.write(`exported ${exported} dead letter(s)\n`);
    }
    return ExitCode.ok;
  });
}

/** `harrier dlq import`: adds dead letters from JSON lines. */
export async function importCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, { in: { type: 'string' } });
  if (values.help === true) return help(io, IMPORT_HELP);
  noPositionals(positionals, 'harrier dlq import');
  const ctx = contextOf(io, values);
  return withDlqBackend(ctx, async ({ store }) => {
    const input = values.in === undefined ? io.stdin : createReadStream(values.in, 'utf8');
    const rl = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY, terminal: false });
    let lineNo = 0;
    let imported = 0;
    const invalid: { line: number; error: string }[] = [];
    let batch: Promise<unknown>[] = [];
    for await (const line of rl) {
      lineNo++;
      if (line.trim() === '') continue;
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch (error) {
        invalid.push({
          line: lineNo,
          error: `not JSON: ${error instanceof Error ? error.message : String(error)}`,
        });
        continue;
      }
      const result = parseDeadLetterRecord(parsed);
      if (!result.ok) {
        invalid.push({ line: lineNo, error: `not a dead-letter record: ${result.issues.join('; ')}` });
        continue;
      }
      batch.push(store.add(result.record).then(() => imported++));
      if (batch.length >= 200) {
        await Promise.all(batch);
        batch = [];
      }
    }
    await Promise.all(batch);
    for (const bad of invalid) {
      if (ctx.json) writeJson(io.stdout, { line: bad.line, ok: false, error: bad.error });
      else io.stderr.write(`line ${bad.line}: ${bad.error}\n`);
    }
    if (ctx.json) writeJson(io.stdout, { summary: { imported, invalid: invalid.length } });
    else io.stdout.write(`imported ${imported}, invalid ${invalid.length}\n`);
    return invalid.length > 0 ? ExitCode.someFailed : ExitCode.ok;
  });
}
