import type { Cluster, Redis } from 'ioredis';
import type { Checkpoint } from '../log/checkpoint-store.js';
import { loadRedisLayer } from '../redis/load-redis-layer.js';
import { GLOBAL_HELP, connect, contextOf, parse, type CommandContext } from './cli-context.js';
import { ExitCode, formatTable, iso, nothingMatched, usageError, writeJson, type CliIo } from './cli-io.js';

export const PROJECTIONS_HELP = `Usage: harrier projections <command> [options]

Commands:
  status [name]      checkpoint, log end and lag per projection, topic and partition
  rebuild <name>     reset a projection's checkpoints so it replays from offset 0 after a restart

${GLOBAL_HELP}
`;

const STATUS_HELP = `Usage: harrier projections status [name] [--json]

For each projection with checkpoints in Redis (RedisCheckpointStore), and each partition of the
topics it reads: the checkpoint (last offset completed), the log's end offset (RedisEventLog) and
the lag between them. Topics and partitions are discovered from the log's <prefix>:log:*:next keys
(SCAN), so a partition that never had an append does not show.

${GLOBAL_HELP}
`;

const REBUILD_HELP = `Usage: harrier projections rebuild <name> [--json]

Deletes every checkpoint of the projection in Redis. Running processes notice within their
rebuildCheckIntervalMs (5 s by default): each calls the projection's reset() and replays it from
offset 0. Processes started later find no checkpoint and replay from 0 as well. Exits 4 when the
projection has no checkpoints.

${GLOBAL_HELP}
`;

/** Runs `harrier projections ...`. */
export async function projectionsCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'status':
      return statusCommand(rest, io);
    case 'rebuild':
      return rebuildCommand(rest, io);
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      io.stdout.write(PROJECTIONS_HELP);
      return sub === undefined ? ExitCode.usage : ExitCode.ok;
    default:
      throw usageError(`Unknown command "projections ${sub}": run \`harrier projections --help\``);
  }
}

/**
 * Every (topic, partition) the log under `prefix` has appended to, from its `:next` counters. On a
 * cluster every primary is scanned (the prefix's hash tag puts all of them on one).
 */
export async function discoverPartitions(
  client: Redis | Cluster,
  prefix: string,
): Promise<Map<string, number[]>> {
  const head = `${prefix}:log:`;
  const pattern = `${head.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*:next`;
  const topics = new Map<string, number[]>();
  const { isCluster } = await loadRedisLayer();
  const servers = isCluster(client) ? client.nodes('master') : [client];
  for (const server of servers) {
    let cursor = '0';
    do {
      const [next, keys] = await server.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
      cursor = next;
      for (const key of keys) {
        const middle = key.slice(head.length, -':next'.length);
        const at = middle.lastIndexOf(':');
        const partition = middle.slice(at + 1);
        if (at <= 0 || !/^\d+$/.test(partition)) continue;
        const topic = middle.slice(0, at);
        const list = topics.get(topic) ?? [];
        list.push(Number(partition));
        topics.set(topic, list);
      }
    } while (cursor !== '0');
  }
  for (const list of topics.values()) list.sort((a, b) => a - b);
  return topics;
}

interface StatusRow {
  projection: string;
  topic: string;
  partition: number;
  checkpoint: number | null;
  endOffset: number;
  lag: number;
  updatedAt: string | null;
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
  const client = await connect(ctx);
  try {
    const { RedisCheckpointStore } = await loadRedisLayer();
    const checkpoints = new RedisCheckpointStore({ connection: client, prefix: ctx.prefix });
    const stored = await checkpoints.list(name);
    const discovered = await discoverPartitions(client, ctx.prefix);
    const rows = await statusRows(ctx, client, stored, discovered);
    if (name !== undefined && rows.length === 0) {
      throw nothingMatched(`Projection "${name}" has no checkpoints under prefix ${ctx.prefix}`);
    }
    if (ctx.json) {
      for (const row of rows) writeJson(io.stdout, row);
      return ExitCode.ok;
    }
    if (rows.length === 0) {
      io.stdout.write(`No projection checkpoints under prefix ${ctx.prefix}.\n`);
    } else {
      io.stdout.write(
        formatTable(
          ['PROJECTION', 'TOPIC', 'PARTITION', 'CHECKPOINT', 'END', 'LAG', 'UPDATED'],
          rows.map((r) => [
            r.projection,
            r.topic,
            String(r.partition),
            r.checkpoint === null ? '-' : String(r.checkpoint),
            String(r.endOffset),
            String(r.lag),
            r.updatedAt ?? '-',
          ]),
        ),
      );
    }
    return ExitCode.ok;
  } finally {
    client.disconnect();
  }
}

async function statusRows(
  ctx: CommandContext,
  client: Redis | Cluster,
  stored: readonly Checkpoint[],
  discovered: ReadonlyMap<string, readonly number[]>,
): Promise<StatusRow[]> {
  const topicsOf = new Map<string, Set<string>>();
  for (const cp of stored) {
    const set = topicsOf.get(cp.projection) ?? new Set<string>();
    set.add(cp.topic);
    topicsOf.set(cp.projection, set);
  }
  const allTopics = new Set([...discovered.keys(), ...stored.map((cp) => cp.topic)]);
  const partitionsOf = (topic: string): number[] => {
    const set = new Set(discovered.get(topic) ?? []);
    for (const cp of stored) if (cp.topic === topic) set.add(cp.partition);
    return [...set].sort((a, b) => a - b);
  };
  const { RedisEventLog } = await loadRedisLayer();
  const log = new RedisEventLog({
    connection: client,
    prefix: ctx.prefix,
    topics: [...allTopics].map((topic) => ({
      name: topic,
      partitions: Math.max(...partitionsOf(topic), 0) + 1,
    })),
  });
  const ends = new Map<string, number>();
  try {
    for (const topic of allTopics) {
      for (const partition of partitionsOf(topic)) {
        ends.set(`${topic}\u0000${partition}`, await log.endOffset(topic, partition));
      }
    }
  } finally {
    await log.close();
  }
  const rows: StatusRow[] = [];
  for (const [projection, topics] of [...topicsOf].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    for (const topic of [...topics].sort()) {
      for (const partition of partitionsOf(topic)) {
        const cp = stored.find(
          (c) => c.projection === projection && c.topic === topic && c.partition === partition,
        );
        const endOffset = ends.get(`${topic}\u0000${partition}`) ?? 0;
        // A checkpoint is the last offset completed, so the next one to read is checkpoint + 1.
        const nextToRead = cp === undefined ? 0 : cp.offset + 1;
        rows.push({
          projection,
          topic,
          partition,
          checkpoint: cp === undefined ? null : cp.offset,
          endOffset,
          lag: Math.max(0, endOffset - nextToRead),
          updatedAt: cp === undefined || cp.updatedAt === 0 ? null : iso(cp.updatedAt),
        });
      }
    }
  }
  return rows;
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
  const client = await connect(ctx);
  try {
    const { RedisCheckpointStore } = await loadRedisLayer();
    const checkpoints = new RedisCheckpointStore({ connection: client, prefix: ctx.prefix });
    const stored = await checkpoints.list(name);
    if (stored.length === 0) {
      const known = [...new Set((await checkpoints.list()).map((cp) => cp.projection))];
      throw nothingMatched(
        `Projection "${name}" has no checkpoints under prefix ${ctx.prefix}${known.length > 0 ? `; known: ${known.join(', ')}` : ''}`,
      );
    }
    await checkpoints.reset(name);
    const note =
      'running processes rebuild it (reset() and replay from offset 0) within their rebuild check interval (5 s by default)';
    if (ctx.json) writeJson(io.stdout, { projection: name, reset: stored.length, note });
    else io.stdout.write(`Reset ${stored.length} checkpoint(s) of projection "${name}".\nNote: ${note}.\n`);
    return ExitCode.ok;
  } finally {
    client.disconnect();
  }
}
