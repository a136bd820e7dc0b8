import type { SystemAdmin } from '../admin/system-admin.js';
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

export const PROJECTIONS_HELP = `Usage: harrier projections <command> [options]

Commands:
  status [name]      checkpoint, log end and lag per projection, topic and partition
  rebuild <name>     reset a projection's checkpoints so it replays from offset 0 after a restart

${GLOBAL_HELP}
`;

const STATUS_HELP = `Usage: harrier projections status [name] [--json]

For each projection with checkpoints in the system's checkpoint store, and each partition of the
topics it reads: the checkpoint (last offset completed), the event log's end offset and the lag
between them. Topics and partitions are discovered from the log and the checkpoints, so a
partition that never had an append nor a checkpoint does not show. PostgreSQL keeps checkpoints
but no event log: on a postgres:// URL the checkpoints show alone (END and LAG "-", null in
--json), with a note on stderr.

${GLOBAL_HELP}
`;

const REBUILD_HELP = `Usage: harrier projections rebuild <name> [--json]

Deletes every checkpoint of the projection in the system's checkpoint store. Running processes
notice within their
rebuildCheckIntervalMs (5 s by default): each calls the projection's reset() and replays it from
offset 0. Processes started later find no checkpoint and replay from 0 as well. Exits 4 when the
projection has no checkpoints.

${GLOBAL_HELP}
`;

/** Runs `harrier projections ...`. */
export function projectionsCommand(argv: readonly string[], io: CliIo): Promise<number> {
  return runSubcommand(
    'projections',
    PROJECTIONS_HELP,
    { status: statusCommand, rebuild: rebuildCommand },
    argv,
    io,
  );
}

async function statusCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) {
    io.stdout.write(STATUS_HELP);
    return ExitCode.ok;
  }
  if (positionals.length > 1)
    throw usageError('`harrier projections status` takes at most one projection name');
  const ctx = contextOf(io, values);
  const name = positionals[0];
  const admin = await openAdmin(ctx);
  try {
    const rows = await statusRows(admin, name);
    if (admin.eventLogNote !== undefined) io.stderr.write(`note: ${admin.eventLogNote}\n`);
    if (name !== undefined && rows.length === 0) {
      throw nothingMatched(`Projection "${name}" has no checkpoints under ${ctx.scopeLabel}`);
    }
    if (ctx.json) {
      for (const row of rows) writeJson(io.stdout, row);
      return ExitCode.ok;
    }
    if (rows.length === 0) {
      io.stdout.write(`No projection checkpoints under ${ctx.scopeLabel}.\n`);
    } else {
      io.stdout.write(
        formatTable(
          ['PROJECTION', 'TOPIC', 'PARTITION', 'CHECKPOINT', 'END', 'LAG', 'UPDATED'],
          rows.map((r) => [
            r.projection,
            r.topic,
            String(r.partition),
            r.checkpoint === null ? '-' : String(r.checkpoint),
            r.endOffset === null ? '-' : String(r.endOffset),
            r.lag === null ? '-' : String(r.lag),
            r.updatedAt ?? '-',
          ]),
        ),
      );
    }
    return ExitCode.ok;
  } finally {
    await admin.close();
  }
}

async function rebuildCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) {
    io.stdout.write(REBUILD_HELP);
    return ExitCode.ok;
  }
  if (positionals.length !== 1)
    throw usageError('`harrier projections rebuild` takes exactly one projection name');
  const name = positionals[0] ?? '';
  const ctx = contextOf(io, values);
  const admin = await openAdmin(ctx);
  try {
    const checkpoints = admin.checkpointStore();
    const stored = await checkpoints.list(name);
    if (stored.length === 0) {
      const known = [...new Set((await checkpoints.list()).map((cp) => cp.projection))];
      throw nothingMatched(
        `Projection "${name}" has no checkpoints under ${ctx.scopeLabel}${known.length > 0 ? `; known: ${known.join(', ')}` : ''}`,
      );
    }
    await checkpoints.reset(name);
    const note =
      'running processes rebuild it (reset() and replay from offset 0) within their rebuild check interval (5 s by default)';
    if (ctx.json) writeJson(io.stdout, { projection: name, reset: stored.length, note });
    else io.stdout.write(`Reset ${stored.length} checkpoint(s) of projection "${name}".\nNote: ${note}.\n`);
    return ExitCode.ok;
  } finally {
    await admin.close();
  }
}

/** A row of `projections status`: log end and lag are null where the backend keeps no event log. */
interface StatusRow {
  readonly projection: string;
  readonly topic: string;
  readonly partition: number;
  readonly checkpoint: number | null;
  readonly endOffset: number | null;
  readonly lag: number | null;
  readonly updatedAt: string | null;
}

/**
 * The rows of `projections status`: each checkpoint with the log's end and the lag, or, on a
 * backend that keeps no event log (see `StoreAdmin.eventLogNote`), the stored checkpoints alone.
 */
async function statusRows(admin: SystemAdmin, name: string | undefined): Promise<StatusRow[]> {
  if (admin.eventLogNote !== undefined) {
    return (await admin.checkpointStore().list(name)).map((cp) => ({
      projection: cp.projection,
      topic: cp.topic,
      partition: cp.partition,
      checkpoint: cp.offset,
      endOffset: null,
      lag: null,
      updatedAt: cp.updatedAt === 0 ? null : iso(cp.updatedAt),
    }));
  }
  return (await admin.projectionLags(name)).map((lag) => ({
    ...lag,
    checkpoint: lag.checkpoint ?? null,
    updatedAt: lag.updatedAt === undefined ? null : iso(lag.updatedAt),
  }));
}
