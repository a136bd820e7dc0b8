import { parseArgs } from 'node:util';
import type { OutboxAdmin, ParkedOutboxRow } from '../admin/outbox-admin.js';
import { loadPostgresLayer } from '../postgres/load-postgres-layer.js';
import { help, positiveInteger } from './cli-args.js';
import {
  CliExit,
  ExitCode,
  clip,
  formatTable,
  iso,
  runSubcommand,
  usageError,
  writeJson,
  type CliIo,
} from './cli-io.js';
import {
  databaseUrlOf,
  POSTGRES_CONNECTION_HELP,
  POSTGRES_CONNECTION_OPTIONS,
  schemaOf,
} from './database-url.js';
import { ProgressBar } from './progress.js';

/** Help of `harrier postgres outbox`. */
export const OUTBOX_HELP = `Usage: harrier postgres outbox <command> [options]

The outbox relay parks a row it could not publish after its tries (maxAttempts: a command with no
route, a message the broker refuses) or that is malformed, so the rows behind it in its lane go on.
An outage of the broker never parks a row.

Commands:
  parked             list the parked rows, oldest parked first
  show <id>          one parked row in full, with its message body
  replay <id>...     move parked rows back into the outbox (at the end of their lane, tries reset)
  replay --all       move every parked row back, oldest parked first
  delete <id>...     delete parked rows for good

Exit codes: 0 ok, 1 some ids failed, 2 usage error, 3 PostgreSQL unreachable, 4 nothing matched.

${POSTGRES_CONNECTION_HELP}
`;

const PARKED_HELP = `Usage: harrier postgres outbox parked [--limit N] [--cursor C] [--database-url URL] [--schema NAME] [--json]

Lists the outbox rows the relay parked, oldest parked first: id, when, type, tries, error. With
--json, one line per row, then {"next": cursor} when there are more (pass it as --cursor).

Options:
  --limit <n>           rows per page (default: 50, at most 1000)
  --cursor <c>          the next page, as the previous page printed it

${POSTGRES_CONNECTION_HELP}
`;

const SHOW_HELP = `Usage: harrier postgres outbox show <id> [--database-url URL] [--schema NAME] [--json]

Shows one parked outbox row in full: the message, its lane, the last error, the tries and when they
failed. Exit code 4 when there is no such row.

${POSTGRES_CONNECTION_HELP}
`;

const REPLAY_HELP = `Usage: harrier postgres outbox replay <id>... | --all [--database-url URL] [--schema NAME] [--json]

Moves parked rows back into the outbox, each at the end of its lane with its tries reset; a running
relay publishes them again (fix the cause first: deploy the endpoint that handles the command, ...).
With --all, every parked row, oldest parked first and 100 per transaction, with a progress bar on a
terminal. With --json: {"id", "replayed": true} per id, or {"id", "error"} for one that is not
parked; {"replayed": n} for --all. Exit codes: 0 all replayed, 1 some ids not parked, 4 none.

Options:
  --all                 every parked row

${POSTGRES_CONNECTION_HELP}
`;

const DELETE_HELP = `Usage: harrier postgres outbox delete <id>... [--database-url URL] [--schema NAME] [--json]

Deletes parked outbox rows for good: their messages are never published. With --json:
{"id", "deleted": true} per id, or {"id", "error"} for one that is not parked. Exit codes: 0 all
deleted, 1 some ids not parked, 4 none.

${POSTGRES_CONNECTION_HELP}
`;

/** Runs `harrier postgres outbox ...`. */
export function outboxCommand(argv: readonly string[], io: CliIo): Promise<number> {
  return runSubcommand(
    'postgres outbox',
    OUTBOX_HELP,
    { parked: parkedCommand, show: showCommand, replay: replayCommand, delete: deleteCommand },
    argv,
    io,
  );
}

const EXTRA_OPTIONS = {
  limit: { type: 'string' },
  cursor: { type: 'string' },
  all: { type: 'boolean' },
} as const;

interface OutboxArgs {
  readonly values: {
    'database-url'?: string;
    schema?: string;
    json?: boolean;
    help?: boolean;
    limit?: string;
    cursor?: string;
    all?: boolean;
  };
  readonly positionals: readonly string[];
}

function parseOutboxArgs(argv: readonly string[]): OutboxArgs {
  try {
    return parseArgs({
      args: [...argv],
      options: { ...POSTGRES_CONNECTION_OPTIONS, ...EXTRA_OPTIONS },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw usageError(`${error instanceof Error ? error.message : String(error)}; see --help`);
  }
}

/** Refuses the options a command does not take (the parser knows every command's options). */
function only(
  values: OutboxArgs['values'],
  command: string,
  allowed: readonly (keyof typeof EXTRA_OPTIONS)[],
): void {
  for (const option of Object.keys(EXTRA_OPTIONS) as (keyof typeof EXTRA_OPTIONS)[]) {
    if (values[option] !== undefined && !allowed.includes(option)) {
      throw usageError(`\`harrier postgres outbox ${command}\` takes no --${option}; see --help`);
    }
  }
}

/** Opens the admin of the command's PostgreSQL, runs `work` on it, and closes it. */
async function withOutboxAdmin<T>(
  values: OutboxArgs['values'],
  io: CliIo,
  work: (admin: OutboxAdmin) => Promise<T>,
): Promise<T> {
  const url = databaseUrlOf(values['database-url'], io);
  const { PostgresOutboxAdmin } = await loadPostgresLayer();
  const schema = schemaOf(values.schema, io.env);
  const admin = new PostgresOutboxAdmin({ connection: url, ...(schema !== undefined ? { schema } : {}) });
  try {
    return await work(admin);
  } finally {
    await admin.close();
  }
}

const jsonOf = (values: OutboxArgs['values'], io: CliIo): boolean => values.json ?? io.stdout.isTTY !== true;

function summaryOf(row: ParkedOutboxRow): Record<string, unknown> {
  return {
    id: row.id,
    messageId: row.messageId,
    kind: row.kind,
    type: row.type,
    partitionKey: row.partitionKey ?? null,
    lane: row.lane,
    reason: row.reason,
    errorCode: row.errorCode ?? null,
    error: row.error,
    attempts: row.attempts,
    firstFailedAt: iso(row.firstFailedAt),
    lastFailedAt: iso(row.lastFailedAt),
    parkedAt: iso(row.parkedAt),
  };
}

function detailOf(row: ParkedOutboxRow): Record<string, unknown> {
  return {
    ...summaryOf(row),
    ordered: row.ordered,
    topic: row.topic ?? null,
    deliverAt: row.deliverAt === undefined ? null : iso(row.deliverAt),
    createdAt: iso(row.createdAt),
    body: row.body,
  };
}

async function parkedCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseOutboxArgs(argv);
  if (values.help === true) return help(io, PARKED_HELP);
  only(values, 'parked', ['limit', 'cursor']);
  if (positionals.length > 0) {
    throw usageError(
      `\`harrier postgres outbox parked\` takes no arguments, got "${positionals.join(' ')}"; see --help`,
    );
  }
  const limit = positiveInteger('limit', values.limit ?? '50');
  if (limit > 1000) throw usageError(`--limit ${limit} is over 1000; page with --cursor instead`);
  const json = jsonOf(values, io);
  const page = await withOutboxAdmin(values, io, (admin) =>
    admin.listParked({ limit, ...(values.cursor !== undefined ? { cursor: values.cursor } : {}) }),
  );
  if (json) {
    for (const row of page.rows) writeJson(io.stdout, summaryOf(row));
    if (page.next !== undefined) writeJson(io.stdout, { next: page.next });
    return ExitCode.ok;
  }
  if (page.rows.length === 0) {
    io.stdout.write('No parked outbox rows.\n');
    return ExitCode.ok;
  }
  io.stdout.write(
    formatTable(
      ['ID', 'PARKED', 'TYPE', 'KEY', 'LANE', 'TRIES', 'ERROR'],
      page.rows.map((row) => [
        row.id,
        iso(row.parkedAt).replace(/\.\d{3}Z$/, 'Z'),
        row.type,
        row.partitionKey ?? '-',
        String(row.lane),
        String(row.attempts),
        clip(
          row.reason === 'malformed'
            ? `malformed: ${row.error}`
            : `${row.errorCode ?? 'error'}: ${row.error}`,
          60,
        ),
      ]),
    ),
  );
  if (page.next !== undefined) io.stdout.write(`\nMore: add --cursor ${page.next}\n`);
  return ExitCode.ok;
}

const notParked = (id: string): string =>
  `No parked outbox row "${id}": list them with \`harrier postgres outbox parked\``;

async function showCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseOutboxArgs(argv);
  if (values.help === true) return help(io, SHOW_HELP);
  only(values, 'show', []);
  const [id, ...more] = positionals;
  if (id === undefined || more.length > 0) {
    throw usageError('`harrier postgres outbox show` takes exactly one parked row id; see --help');
  }
  const json = jsonOf(values, io);
  const row = await withOutboxAdmin(values, io, (admin) => admin.getParked(id));
  if (row === undefined) {
    if (json) writeJson(io.stdout, { id, error: { code: 'not-parked', message: notParked(id) } });
    throw new CliExit(ExitCode.nothingMatched, notParked(id));
  }
  if (json) {
    writeJson(io.stdout, detailOf(row));
    return ExitCode.ok;
  }
  let body = row.body;
  try {
    body = JSON.stringify(JSON.parse(row.body), null, 2);
  } catch {
    // A malformed body is shown as it was stored.
  }
  const lines = [
    `Parked outbox row ${row.id}`,
    `  message       ${row.messageId} ${row.kind} ${row.type}`,
    `  key, lane     ${row.partitionKey ?? '-'}, lane ${row.lane}${row.ordered ? ' (ordered)' : ''}`,
    ...(row.topic !== undefined ? [`  topic         ${row.topic}`] : []),
    ...(row.deliverAt !== undefined ? [`  deliver at    ${iso(row.deliverAt)}`] : []),
    `  reason        ${row.reason}`,
    `  error         ${row.errorCode !== undefined ? `${row.errorCode}: ` : ''}${row.error}`,
    `  tries         ${row.attempts}, first failed ${iso(row.firstFailedAt)}, last ${iso(row.lastFailedAt)}`,
    `  recorded      ${iso(row.createdAt)}`,
    `  parked        ${iso(row.parkedAt)}`,
    '',
    body,
    '',
  ];
  io.stdout.write(lines.join('\n'));
  return ExitCode.ok;
}

/** Runs `act` on each id; the exit code: 0 all done, 1 some not parked, 4 none. */
async function eachId(
  io: CliIo,
  json: boolean,
  ids: readonly string[],
  act: (id: string) => Promise<boolean>,
  done: 'replayed' | 'deleted',
): Promise<number> {
  let ok = 0;
  for (const id of ids) {
    if (await act(id)) {
      ok += 1;
      if (json) writeJson(io.stdout, { id, [done]: true });
      else io.stdout.write(`${done} ${id}\n`);
    } else {
      if (json) writeJson(io.stdout, { id, error: { code: 'not-parked', message: notParked(id) } });
      io.stderr.write(`harrier: ${notParked(id)}\n`);
    }
  }
  if (ok === 0) return ExitCode.nothingMatched;
  return ok === ids.length ? ExitCode.ok : ExitCode.someFailed;
}

async function replayCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseOutboxArgs(argv);
  if (values.help === true) return help(io, REPLAY_HELP);
  only(values, 'replay', ['all']);
  const all = values.all === true;
  if (all ? positionals.length > 0 : positionals.length === 0) {
    throw usageError('`harrier postgres outbox replay` takes parked row ids or --all (not both); see --help');
  }
  const json = jsonOf(values, io);
  if (!all) {
    return withOutboxAdmin(values, io, (admin) =>
      eachId(io, json, positionals, (id) => admin.replayParked(id), 'replayed'),
    );
  }
  const replayed = await withOutboxAdmin(values, io, async (admin) => {
    let progress: ProgressBar | undefined;
    let shown = 0;
    const moved = await admin.replayAllParked({
      onProgress: (done, total) => {
        progress ??= new ProgressBar(io.stderr, total, 'replaying');
        progress.tick(done - shown);
        shown = done;
      },
    });
    progress?.finish();
    return moved;
  });
  if (json) writeJson(io.stdout, { replayed });
  if (replayed === 0) {
    throw new CliExit(ExitCode.nothingMatched, 'No parked outbox rows: nothing to replay');
  }
  if (!json) io.stdout.write(`Replayed ${replayed} parked outbox row${replayed === 1 ? '' : 's'}.\n`);
  return ExitCode.ok;
}

async function deleteCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseOutboxArgs(argv);
  if (values.help === true) return help(io, DELETE_HELP);
  only(values, 'delete', []);
  if (positionals.length === 0) {
    throw usageError('`harrier postgres outbox delete` takes one or more parked row ids; see --help');
  }
  const json = jsonOf(values, io);
  return withOutboxAdmin(values, io, (admin) =>
    eachId(io, json, positionals, (id) => admin.deleteParked(id), 'deleted'),
  );
}
