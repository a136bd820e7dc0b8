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
  status [name]      checkpoint, log end, lag, generation and rebuild marker per projection
  rebuild <name>     ask for a rebuild: processes reset the read model and replay from offset 0

${GLOBAL_HELP}
`;

const STATUS_HELP = `Usage: harrier projections status [name] [--json]

For each projection with checkpoints in the system's checkpoint store, and each partition of the
topics it reads: the checkpoint (last offset completed), the event log's end offset and the lag
between them, with the projection's generation (raised by every rebuild) and its rebuild
marker: REBUILDING shows since when a rebuild is under way (its marker set: the read model may not
be reset yet), and a projection mid-rebuild shows on a row of its own while it has no checkpoint.
Topics and partitions are discovered from the log and the checkpoints, so a partition that never
had an append nor a checkpoint does not show. PostgreSQL keeps checkpoints but no event log: on a
postgres:// URL the checkpoints show alone (END and LAG "-", null in --json), with a note on
stderr.

With --json, one object per line: projection, topic, partition, checkpoint, endOffset, lag,
updatedAt, generation, and rebuilding ({ id, startedAt } or null); topic, partition, endOffset and
lag are null on the row of a projection mid-rebuild without checkpoints.

${GLOBAL_HELP}
`;

const REBUILD_HELP = `Usage: harrier projections rebuild <name> [--json]

Sets the projection's rebuild marker, raises its generation and deletes its checkpoints, in one
step of the system's checkpoint store. A running process notices at its next checkpoint commit or
within its rebuildCheckIntervalMs (5 s by default): it stops the projection without committing,
calls the projection's reset(), clears the marker and replays from offset 0. A process started
later does the same before projecting. Until then \`harrier projections status\` shows the marker.
Exits 4 when the projection has neither checkpoints nor a generation.

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

/** One line of `harrier projections status`. */
interface StatusRow {
  readonly projection: string;
  readonly topic: string | null;
  readonly partition: number | null;
  readonly checkpoint: number | null;
  readonly endOffset: number | null;
  readonly lag: number | null;
  readonly updatedAt: string | null;
  readonly generation: number;
  readonly rebuilding: { readonly id: string; readonly startedAt: string } | null;
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
    const generations = new Map(
      (await admin.checkpointStore().generations()).map((g) => [g.projection, g] as const),
    );
    const stateOf = (projection: string) => {
      const stored = generations.get(projection);
      return {
        generation: stored?.generation ?? 0,
        rebuilding:
          stored?.rebuild === undefined
            ? null
            : { id: stored.rebuild.id, startedAt: iso(stored.rebuild.startedAt) },
      };
    };
    const rows: StatusRow[] = (await statusRows(admin, name)).map((row) => ({
      ...row,
      ...stateOf(row.projection),
    }));
    if (admin.eventLogNote !== undefined) io.stderr.write(`note: ${admin.eventLogNote}\n`);
    // A projection mid-rebuild has no checkpoints until it projects again: a row of its own.
    for (const stored of generations.values()) {
      if (stored.rebuild === undefined || (name !== undefined && stored.projection !== name)) continue;
      if (rows.some((r) => r.projection === stored.projection)) continue;
      rows.push({
        projection: stored.projection,
        topic: null,
        partition: null,
        checkpoint: null,
        endOffset: null,
        lag: null,
        updatedAt: null,
        ...stateOf(stored.projection),
      });
    }
    rows.sort((a, b) => (a.projection < b.projection ? -1 : a.projection > b.projection ? 1 : 0));
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
          ['PROJECTION', 'TOPIC', 'PARTITION', 'CHECKPOINT', 'END', 'LAG', 'UPDATED', 'GEN', 'REBUILDING'],
          rows.map((r) => [
            r.projection,
            r.topic ?? '-',
            r.partition === null ? '-' : String(r.partition),
            r.checkpoint === null ? '-' : String(r.checkpoint),
            r.endOffset === null ? '-' : String(r.endOffset),
            r.lag === null ? '-' : String(r.lag),
            r.updatedAt ?? '-',
            String(r.generation),
            r.rebuilding === null ? '-' : `since ${r.rebuilding.startedAt}`,
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
    const before = await checkpoints.generation(name);
    if (stored.length === 0 && before.generation === 0) {
      const known = [...new Set((await checkpoints.list()).map((cp) => cp.projection))];
      throw nothingMatched(
        `Projection "${name}" has no checkpoints under ${ctx.scopeLabel}${known.length > 0 ? `; known: ${known.join(', ')}` : ''}`,
      );
    }
    await checkpoints.reset(name);
    const after = await checkpoints.generation(name);
    const note =
      'a running process completes the rebuild (reset() and replay from offset 0) at its next checkpoint commit or within its rebuild check interval (5 s by default); a process started later does it before projecting';
    if (ctx.json) {
      writeJson(io.stdout, {
        projection: name,
        reset: stored.length,
        generation: after.generation,
        rebuildId: after.rebuild?.id ?? null,
        note,
      });
    } else {
      io.stdout.write(
        `Removed ${stored.length} checkpoint(s) of projection "${name}" and set its rebuild marker (generation ${after.generation}).\nNote: ${note}.\n`,
      );
    }
    return ExitCode.ok;
  } finally {
    await admin.close();
  }
}

/** A checkpoint's part of a `projections status` row: log end and lag are null where the backend keeps no event log. */
interface CheckpointRow {
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
async function statusRows(admin: SystemAdmin, name: string | undefined): Promise<CheckpointRow[]> {
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
