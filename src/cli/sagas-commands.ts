import type {
  SagaAppliedStep,
  SagaInstance,
  SagaSummary,
  SagaListFilter,
  SagaTimeoutRecord,
} from '../sagas/saga-store.js';
import { GLOBAL_HELP, contextOf, openAdmin, parse } from './cli-context.js';
import {
  ExitCode,
  clip,
  formatTable,
  iso,
  nothingMatched,
  runSubcommand,
  usageError,
  writeJson,
  type CliIo,
} from './cli-io.js';
import { help, positiveInteger } from './cli-args.js';

/** Applied steps `sagas show` prints on a terminal; `--json` gives them all. */
const SHOWN_APPLIED = 10;

/** Help of `harrier sagas`. */
export const SAGAS_HELP = `Usage: harrier sagas <command> [options]

Commands:
  list [saga]        saga instances: status, version, pending timeouts
  show <saga> <id>   one instance in full: state, version, pending timeouts, applied steps

${GLOBAL_HELP}
`;

const LIST_HELP = `Usage: harrier sagas list [saga] [--status active|completed|any] [--limit N] [--cursor C] [--json]

Saga instances in the system's saga store, ordered by saga name then id, one page at a time; with
a saga name, only its instances. Completed instances are listed until their retention runs out.
In JSON mode each line is an instance without its state, and a last line {"next":"<cursor>"}
follows when there is another page.

  --status <status>   active, completed or any (default any)
  --limit <n>         instances per page (default 50)
  --cursor <cursor>   continue after the page that printed this cursor

${GLOBAL_HELP}
`;

const SHOW_HELP = `Usage: harrier sagas show <saga> <id> [--json]

One saga instance: status, version, start, last update and completion times, pending timeouts, its
state with the version of the saga's state shape it was saved with, and the steps it remembers for redeliveries (newest first: the message each handled and the
types of the messages it recorded, never their bodies; the latest ${SHOWN_APPLIED} on a terminal, all with
--json). Exits 4 when there is no such instance (never saved, removed, or past its retention).

${GLOBAL_HELP}
`;

/** Runs `harrier sagas ...`. */
export function sagasCommand(argv: readonly string[], io: CliIo): Promise<number> {
  return runSubcommand('sagas', SAGAS_HELP, { list: listCommand, show: showCommand }, argv, io);
}

const timeoutJson = (t: SagaTimeoutRecord): Record<string, unknown> => ({
  id: t.id,
  type: t.type,
  dueAt: iso(t.dueAt),
});

/** An applied step as JSON: the ids and types of what it recorded, without bodies. */
const appliedJson = (step: SagaAppliedStep): Record<string, unknown> => ({
  message: step.message,
  outgoing: step.outgoing.map((m) => ({ id: m.id, kind: m.kind, type: m.type })),
});

/** An instance as JSON, times as ISO 8601; the state and applied steps of `whole` when given. */
function instanceJson(instance: SagaSummary, whole?: SagaInstance): Record<string, unknown> {
  return {
    saga: instance.saga,
    id: instance.id,
    status: instance.status,
    version: instance.version,
    stateVersion: instance.stateVersion,
    startedAt: iso(instance.startedAt),
    updatedAt: iso(instance.updatedAt),
    completedAt: instance.completedAt === undefined ? null : iso(instance.completedAt),
    timeouts: instance.timeouts.map(timeoutJson),
    ...(whole !== undefined ? { state: whole.state, applied: whole.applied.map(appliedJson) } : {}),
  };
}

/** What an applied step recorded, for a line: `3 messages: orders.Shipped x2, orders.Billed`. */
function recordedSummary(step: SagaAppliedStep): string {
  const count = step.outgoing.length;
  if (count === 0) return 'no messages';
  const byType = new Map<string, number>();
  for (const m of step.outgoing) byType.set(m.type, (byType.get(m.type) ?? 0) + 1);
  const types = [...byType].map(([type, n]) => (n > 1 ? `${type} x${n}` : type)).join(', ');
  return `${count} message${count === 1 ? '' : 's'}: ${types}`;
}

/** The latest applied steps, newest first, as indented lines. */
function appliedLines(applied: readonly SagaAppliedStep[]): string[] {
  if (applied.length === 0) return ['  none'];
  const shown = applied.slice(-SHOWN_APPLIED).reverse();
  const older = applied.length - shown.length;
  return [
    ...shown.map((step) => `  ${step.message}  ${recordedSummary(step)}`),
    ...(older > 0 ? [`  ... ${older} older (--json lists them all)`] : []),
  ];
}

/** The earliest pending timeout, for a table cell. */
function nextTimeout(timeouts: readonly SagaTimeoutRecord[]): string {
  const first = [...timeouts].sort((a, b) => a.dueAt - b.dueAt)[0];
  if (first === undefined) return '-';
  const more = timeouts.length > 1 ? ` (+${timeouts.length - 1})` : '';
  return `${first.type} at ${iso(first.dueAt).replace(/\.\d{3}Z$/, 'Z')}${more}`;
}

async function listCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    status: { type: 'string' },
    limit: { type: 'string' },
    cursor: { type: 'string' },
  });
  if (values.help === true) return help(io, LIST_HELP);
  if (positionals.length > 1) throw usageError('`harrier sagas list` takes at most one saga name');
  const status = values.status ?? 'any';
  if (status !== 'active' && status !== 'completed' && status !== 'any') {
    throw usageError(`--status "${status}" is not one of active, completed, any`);
  }
  const limit = positiveInteger('limit', values.limit ?? '50');
  const saga = positionals[0];
  const filter: SagaListFilter = {
    ...(saga !== undefined ? { saga } : {}),
    ...(status !== 'any' ? { status } : {}),
  };
  const ctx = contextOf(io, values);
  const admin = await openAdmin(ctx);
  let page;
  try {
    page = await admin
      .sagaStore()
      .list(filter, { limit, ...(values.cursor !== undefined ? { cursor: values.cursor } : {}) });
  } finally {
    await admin.close();
  }
  if (ctx.json) {
    for (const instance of page.instances) writeJson(io.stdout, instanceJson(instance));
    if (page.next !== undefined) writeJson(io.stdout, { next: page.next });
    return ExitCode.ok;
  }
  if (page.instances.length === 0) {
    io.stdout.write(`No saga instances match under ${ctx.scopeLabel}.\n`);
    return ExitCode.ok;
  }
  io.stdout.write(
    formatTable(
      ['SAGA', 'ID', 'STATUS', 'VERSION', 'UPDATED', 'NEXT TIMEOUT'],
      page.instances.map((i) => [
        i.saga,
        clip(i.id, 40),
        i.status,
        String(i.version),
        iso(i.updatedAt).replace(/\.\d{3}Z$/, 'Z'),
        nextTimeout(i.timeouts),
      ]),
    ),
  );
  if (page.next !== undefined) io.stdout.write(`\nMore: add --cursor ${page.next}\n`);
  return ExitCode.ok;
}

async function showCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) return help(io, SHOW_HELP);
  if (positionals.length !== 2) {
    throw usageError('`harrier sagas show` takes a saga name and an instance id; see --help');
  }
  const [saga = '', id = ''] = positionals;
  const ctx = contextOf(io, values);
  const admin = await openAdmin(ctx);
  let instance;
  try {
    instance = await admin.sagaStore().get(saga, id);
  } finally {
    await admin.close();
  }
  if (instance === undefined) {
    throw nothingMatched(
      `No instance "${id}" of saga "${saga}" under ${ctx.scopeLabel}: list them with \`harrier sagas list ${saga}\``,
    );
  }
  if (ctx.json) {
    writeJson(io.stdout, instanceJson(instance, instance));
    return ExitCode.ok;
  }
  const timeouts = [...instance.timeouts].sort((a, b) => a.dueAt - b.dueAt);
  const lines = [
    `Saga ${instance.saga} instance ${instance.id} (${instance.status})`,
    `  version    ${instance.version}`,
    `  started    ${iso(instance.startedAt)}`,
    `  updated    ${iso(instance.updatedAt)}`,
    `  completed  ${instance.completedAt === undefined ? '-' : iso(instance.completedAt)}`,
    '',
    `Pending timeouts (${timeouts.length}):`,
    ...(timeouts.length === 0 ? ['  none'] : timeouts.map((t) => `  ${iso(t.dueAt)}  ${t.type}  (${t.id})`)),
    '',
    `State (version ${instance.stateVersion} of the saga's state shape):`,
    ...JSON.stringify(instance.state, null, 2)
      .split('\n')
      .map((line) => `  ${line}`),
    '',
    `Applied steps, newest first (${instance.applied.length} remembered for redeliveries):`,
    ...appliedLines(instance.applied),
  ];
  io.stdout.write(`${lines.join('\n')}\n`);
  return ExitCode.ok;
}
