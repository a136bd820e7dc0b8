import type { ScheduleRecord } from '../schedules/schedule-record.js';
import { lastMessageIdOf, scheduleOutcomeText } from '../schedules/schedule-outcome.js';
import { GLOBAL_HELP, contextOf, openAdmin, parse } from './cli-context.js';
import {
  ExitCode,
  formatTable,
  iso,
  nothingMatched,
  runSubcommand,
  usageError,
  writeJson,
  type CliIo,
} from './cli-io.js';
import { help } from './cli-args.js';

/** Help of `harrier schedules`. */
export const SCHEDULES_HELP = `Usage: harrier schedules <command> [options]

Commands:
  list               recurring schedules (bus.every): timing, message type, last tick, next run,
                     the last tick's outcome
  show <name>        one schedule in full, payload included
  cancel <name>      remove a schedule: every process running it stops at its next tick

${GLOBAL_HELP}
`;

const LIST_HELP = `Usage: harrier schedules list [--json]

The recurring schedules in the system's schedule store, by name, each with the outcome of its
last tick: "sent <message id>", or "send failed: <error> at <time>" when the send of a tick failed
(the broker was down) and no tick was sent since. In JSON mode each line is a schedule without its
payload.

${GLOBAL_HELP}
`;

const SHOW_HELP = `Usage: harrier schedules show <name> [--json]

One schedule: timing, time zone, message kind and type, catch-up, last tick sent, the outcome of
the last tick, next run, last update and payload. Exits 4 when there is no such schedule.

${GLOBAL_HELP}
`;

const CANCEL_HELP = `Usage: harrier schedules cancel <name> [--json]

Removes the schedule from the store; every process running it stops at its next tick (one tick
under way may still be sent). A process that calls bus.every for it again stores it again. Exits 4
when there is no such schedule.

${GLOBAL_HELP}
`;

/** Runs `harrier schedules ...`. */
export function schedulesCommand(argv: readonly string[], io: CliIo): Promise<number> {
  return runSubcommand(
    'schedules',
    SCHEDULES_HELP,
    { list: listCommand, show: showCommand, cancel: cancelCommand },
    argv,
    io,
  );
}

const isoOrNull = (ms: number | undefined): string | null => (ms === undefined ? null : iso(ms));
const shortIso = (ms: number | undefined): string =>
  ms === undefined ? '-' : iso(ms).replace(/\.000Z$/, 'Z');

/** `0 18 * * 1-5 (Europe/Berlin)` or `every 30000 ms`. */
function timingOf(record: ScheduleRecord): string {
  if (record.cron !== undefined) return `${record.cron} (${record.timeZone ?? 'UTC'})`;
  return `every ${record.everyMs ?? '?'} ms`;
}

/** A schedule as JSON, times as ISO 8601; its payload when `withPayload`. */
function scheduleJson(record: ScheduleRecord, withPayload: boolean): Record<string, unknown> {
  return {
    name: record.name,
    kind: record.kind,
    type: record.type,
    cron: record.cron ?? null,
    timeZone: record.timeZone ?? null,
    everyMs: record.everyMs ?? null,
    catchUp: record.catchUp,
    lastTickAt: isoOrNull(record.lastTickAt),
    lastMessageId: lastMessageIdOf(record) ?? null,
    lastError:
      record.lastError === undefined
        ? null
        : { message: record.lastError.message, at: iso(record.lastError.at) },
    outcome: scheduleOutcomeText(record, iso) ?? null,
    nextRunAt: isoOrNull(record.nextRunAt),
    updatedAt: iso(record.updatedAt),
    ...(withPayload ? { payload: record.payload } : {}),
  };
}

async function listCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) return help(io, LIST_HELP);
  if (positionals.length > 0) throw usageError('`harrier schedules list` takes no arguments');
  const ctx = contextOf(io, values);
  const admin = await openAdmin(ctx);
  let records: ScheduleRecord[];
  try {
    records = await admin.scheduleStore().list();
  } finally {
    await admin.close();
  }
  if (ctx.json) {
    for (const record of records) writeJson(io.stdout, scheduleJson(record, false));
    return ExitCode.ok;
  }
  if (records.length === 0) {
    io.stdout.write(`No schedules under ${ctx.scopeLabel}.\n`);
    return ExitCode.ok;
  }
  io.stdout.write(
    formatTable(
      ['NAME', 'TIMING', 'SENDS', 'LAST TICK', 'NEXT RUN', 'OUTCOME'],
      records.map((r) => [
        r.name,
        timingOf(r),
        `${r.kind} ${r.type}`,
        shortIso(r.lastTickAt),
        shortIso(r.nextRunAt),
        scheduleOutcomeText(r, shortIso) ?? '-',
      ]),
    ),
  );
  return ExitCode.ok;
}

/** The one name `show` and `cancel` take. */
function nameOf(positionals: readonly string[], command: string): string {
  const [name] = positionals;
  if (positionals.length !== 1 || name === undefined || name === '') {
    throw usageError(`\`harrier schedules ${command}\` takes one schedule name; see --help`);
  }
  return name;
}

async function showCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) return help(io, SHOW_HELP);
  const name = nameOf(positionals, 'show');
  const ctx = contextOf(io, values);
  const admin = await openAdmin(ctx);
  let record: ScheduleRecord | undefined;
  try {
    record = await admin.scheduleStore().get(name);
  } finally {
    await admin.close();
  }
  if (record === undefined) {
    throw nothingMatched(
      `No schedule "${name}" under ${ctx.scopeLabel}: list them with \`harrier schedules list\``,
    );
  }
  if (ctx.json) {
    writeJson(io.stdout, scheduleJson(record, true));
    return ExitCode.ok;
  }
  const lines = [
    `Schedule ${record.name}`,
    `  timing     ${timingOf(record)}`,
    `  sends      ${record.kind} ${record.type}`,
    `  catch-up   ${record.catchUp}`,
    `  last tick  ${record.lastTickAt === undefined ? '-' : iso(record.lastTickAt)}`,
    `  outcome    ${scheduleOutcomeText(record, iso) ?? '-'}`,
    `  next run   ${record.nextRunAt === undefined ? '-' : iso(record.nextRunAt)}`,
    `  updated    ${iso(record.updatedAt)}`,
    '',
    'Payload:',
    ...JSON.stringify(record.payload ?? null, null, 2)
      .split('\n')
      .map((line) => `  ${line}`),
  ];
  io.stdout.write(`${lines.join('\n')}\n`);
  return ExitCode.ok;
}

async function cancelCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) return help(io, CANCEL_HELP);
  const name = nameOf(positionals, 'cancel');
  const ctx = contextOf(io, values);
  const admin = await openAdmin(ctx);
  let removed: boolean;
  try {
    removed = await admin.scheduleStore().delete(name);
  } finally {
    await admin.close();
  }
  if (!removed) {
    throw nothingMatched(
      `No schedule "${name}" under ${ctx.scopeLabel}: list them with \`harrier schedules list\``,
    );
  }
  if (ctx.json) writeJson(io.stdout, { name, cancelled: true });
  else io.stdout.write(`Cancelled schedule "${name}" under ${ctx.scopeLabel}.\n`);
  return ExitCode.ok;
}
