import type { DeadLetterRecord, ReplayRecord } from '../../dead-letters/dead-letter-store.js';
import { deadLetterVersion } from '../../dead-letters/dead-letter-version.js';
import { replayOutcome } from '../../dead-letters/replay-outcome.js';
import { SELECTOR_OPTIONS, contextOf, filterOf, noPositionals, parse } from '../cli-context.js';
import {
  ExitCode,
  clip,
  formatTable,
  iso,
  nothingMatched,
  usageError,
  writeJson,
  type CliIo,
} from '../cli-io.js';
import { help, positiveInteger } from '../cli-args.js';
import { GROUPS_HELP, LIST_HELP, SHOW_HELP } from './dlq-help.js';
import { withDlqBackend } from './dlq-backend.js';
import { allMatching } from './dlq-selection.js';

/** What a list line shows of a record: everything but the envelope and the histories. */
function summaryOf(record: DeadLetterRecord): Record<string, unknown> {
  return {
    id: record.id,
    messageId: record.messageId,
    kind: record.kind,
    type: record.type,
    version: deadLetterVersion(record.envelope),
    endpoint: record.endpoint,
    handler: record.handler,
    reason: record.reason,
    status: record.status,
    error: { name: record.error.name, message: record.error.message },
    attemptCount: record.attemptCount,
    firstFailedAt: iso(record.firstFailedAt),
    lastFailedAt: iso(record.lastFailedAt),
    fingerprint: record.fingerprint,
    replays: record.replays.length,
  };
}

/** `harrier dlq list`: one page of dead letters. */
export async function listCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...SELECTOR_OPTIONS,
    limit: { type: 'string' },
    cursor: { type: 'string' },
  });
  if (values.help === true) return help(io, LIST_HELP);
  noPositionals(positionals, 'harrier dlq list');
  const limit = positiveInteger('limit', values.limit ?? '50');
  const filter = filterOf(values, 'dead');
  const ctx = contextOf(io, values);
  const page = await withDlqBackend(ctx, ({ store }) =>
    store.list(filter, { limit, ...(values.cursor !== undefined ? { cursor: values.cursor } : {}) }),
  );
  if (ctx.json) {
    for (const record of page.records) writeJson(io.stdout, summaryOf(record));
    if (page.next !== undefined) writeJson(io.stdout, { next: page.next });
    return ExitCode.ok;
  }
  if (page.records.length === 0) {
    io.stdout.write('No dead letters match.\n');
    return ExitCode.ok;
  }
  io.stdout.write(
    formatTable(
      ['ID', 'LAST FAILED', 'ENDPOINT', 'HANDLER', 'TYPE', 'VER', 'REASON', 'TRIES', 'STATUS', 'ERROR'],
      page.records.map((r) => [
        r.id,
        iso(r.lastFailedAt).replace(/\.\d{3}Z$/, 'Z'),
        r.endpoint,
        r.handler ?? '-',
        r.type ?? '-',
        String(deadLetterVersion(r.envelope) ?? '-'),
        r.reason,
        String(r.attemptCount),
        r.status,
        clip(`${r.error.name}: ${r.error.message}`, 60),
      ]),
    ),
  );
  if (page.next !== undefined) io.stdout.write(`\nMore: add --cursor ${page.next}\n`);
  return ExitCode.ok;
}

/** `harrier dlq show <id>`: one dead letter in full. */
export async function showCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) return help(io, SHOW_HELP);
  if (positionals.length !== 1)
    throw usageError('`harrier dlq show` takes exactly one dead-letter id; see --help');
  const id = positionals[0] ?? '';
  const ctx = contextOf(io, values);
  const record = await withDlqBackend(ctx, ({ store }) => store.get(id));
  if (record === undefined) {
    throw nothingMatched(`No dead letter "${id}": list them with \`harrier dlq list --status any\``);
  }
  const version = deadLetterVersion(record.envelope);
  if (ctx.json) {
    writeJson(io.stdout, { ...record, version });
    return ExitCode.ok;
  }
  let envelope = record.envelope;
  try {
    envelope = JSON.stringify(JSON.parse(record.envelope), null, 2);
  } catch {
    // Malformed bytes are shown as they arrived.
  }
  const lines = [
    `Dead letter ${record.id} (${record.status})`,
    `  message       ${record.messageId ?? '-'} ${record.kind ?? '?'} ${record.type ?? '?'}`,
    `  version       ${version ?? '-'}`,
    `  endpoint      ${record.endpoint}`,
    `  handler       ${record.handler ?? '-'}`,
    `  reason        ${record.reason}`,
    `  attempts      ${record.attemptCount}`,
    `  first failed  ${iso(record.firstFailedAt)}`,
    `  last failed   ${iso(record.lastFailedAt)}`,
    `  fingerprint   ${record.fingerprint}`,
    `  partition key ${record.partitionKey ?? '-'}${record.ordered ? ' (ordered)' : ''}`,
    '',
    'Error:',
    `  ${record.error.name}${record.error.code !== undefined ? ` [${record.error.code}]` : ''}: ${record.error.message}`,
    ...(record.error.stack ?? '')
      .split('\n')
      .slice(1)
      .map((line) => `  ${line.trim()}`),
    '',
    `Attempts (${record.attempts.length} kept of ${record.attemptCount}):`,
    ...(record.attempts.length === 0
      ? ['  none recorded']
      : record.attempts.map(
          (a) => `  #${a.attempt}  ${iso(a.at)}  ${a.error.name}: ${clip(a.error.message, 100)}`,
        )),
    '',
    `Replays (${record.replays.length}):`,
    ...(record.replays.length === 0
      ? ['  never replayed']
      : record.replays.map(
          (r, i) =>
            `  ${iso(r.at)}  by ${r.by ?? '-'}${replayNote(record, r, i === record.replays.length - 1)}`,
        )),
    '',
    'Envelope:',
    envelope,
    '',
  ];
  io.stdout.write(lines.join('\n'));
  return ExitCode.ok;
}

/**
 * What became of one replay, for `dlq show`: when it was handled, else for the latest replay its
 * outcome (`pending`, `failed again`); an earlier replay without `handledAt` shows nothing, since a
 * store without `markReplayHandled` cannot say.
 */
function replayNote(record: DeadLetterRecord, replay: ReplayRecord, latest: boolean): string {
  if (replay.handledAt !== undefined) return `  handled ${iso(replay.handledAt)}`;
  if (!latest) return '';
  const outcome = replayOutcome(record, replay.at);
  return outcome === undefined ? '' : `  ${outcome === 'failed-again' ? 'failed again' : outcome}`;
}

interface Group {
  fingerprint: string;
  count: number;
  sampleId: string;
  errorName: string;
  errorMessage: string;
  endpoint: string;
  handler: string | undefined;
  type: string | undefined;
  reason: string;
  lastFailedAt: number;
}

/** `harrier dlq groups`: counts by failure fingerprint. */
export async function groupsCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, SELECTOR_OPTIONS);
  if (values.help === true) return help(io, GROUPS_HELP);
  noPositionals(positionals, 'harrier dlq groups');
  const filter = filterOf(values, 'dead');
  const ctx = contextOf(io, values);
  const groups = new Map<string, Group>();
  await withDlqBackend(ctx, async ({ store }) => {
    for await (const records of allMatching(store, filter)) {
      for (const r of records) {
        const group = groups.get(r.fingerprint);
        if (group === undefined) {
          groups.set(r.fingerprint, {
            fingerprint: r.fingerprint,
            count: 1,
            sampleId: r.id,
            errorName: r.error.name,
            errorMessage: r.error.message,
            endpoint: r.endpoint,
            handler: r.handler,
            type: r.type,
            reason: r.reason,
            lastFailedAt: r.lastFailedAt,
          });
        } else {
          group.count++;
          group.lastFailedAt = Math.max(group.lastFailedAt, r.lastFailedAt);
        }
      }
    }
  });
  const sorted = [...groups.values()].sort((a, b) => b.count - a.count || b.lastFailedAt - a.lastFailedAt);
  if (ctx.json) {
    for (const g of sorted) writeJson(io.stdout, { ...g, lastFailedAt: iso(g.lastFailedAt) });
    return ExitCode.ok;
  }
  if (sorted.length === 0) {
    io.stdout.write('No dead letters match.\n');
    return ExitCode.ok;
  }
  io.stdout.write(
    formatTable(
      ['FINGERPRINT', 'COUNT', 'ENDPOINT', 'HANDLER', 'TYPE', 'SAMPLE ID', 'ERROR'],
      sorted.map((g) => [
        g.fingerprint,
        String(g.count),
        g.endpoint,
        g.handler ?? '-',
        g.type ?? '-',
        g.sampleId,
        clip(`${g.errorName}: ${g.errorMessage}`, 60),
      ]),
    ),
  );
  return ExitCode.ok;
}
