import type { SubscriptionSpec } from '../broker/message-broker.js';
import { loadRedisLayer } from '../redis/load-redis-layer.js';
import { GLOBAL_HELP, connect, contextOf, noPositionals, parse } from './cli-context.js';
import { ExitCode, formatTable, iso, writeJson, type CliIo } from './cli-io.js';

export const TOPOLOGY_HELP = `Usage: harrier topology [--json]

Lists every endpoint registered under the prefix (<prefix>:harrier:endpoints), its subscriptions,
and the depth of each subscription's BullMQ queues (waiting, active, delayed, failed), partition
queues of ordered types included.

${GLOBAL_HELP}
`;

const STATES = ['wait', 'active', 'delayed', 'failed'] as const;

type Counts = Record<(typeof STATES)[number], number>;

interface RegisteredEndpoint {
  readonly subscriptions: readonly SubscriptionSpec[];
  readonly registeredAt?: number;
}

/** The queue names of one subscription, as BullMqBroker lays them out. */
function queuesOf(endpoint: string, spec: SubscriptionSpec, partitions: number): string[] {
  const ordered = new Set(spec.orderedTypes ?? []);
  const withPartitions = (base: string, hasOrdered: boolean): string[] => [
    base,
    ...(hasOrdered ? Array.from({ length: partitions }, (_, p) => `${base}~p${p}`) : []),
  ];
  if (spec.kind === 'command')
    return spec.types.flatMap((type) => withPartitions(`cmd~${type}`, ordered.has(type)));
  return withPartitions(`evt~${endpoint}~${spec.handler}`, ordered.size > 0);
}

/** Runs `harrier topology`. */
export async function topologyCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) {
    io.stdout.write(TOPOLOGY_HELP);
    return ExitCode.ok;
  }
  noPositionals(positionals, 'harrier topology');
  const ctx = contextOf(io, values);
  const client = await connect(ctx);
  const { queueJobCounts } = await loadRedisLayer();
  try {
    const endpoints = await client.hgetall(`${ctx.prefix}:harrier:endpoints`);
    const partitions = Number((await client.get(`${ctx.prefix}:harrier:partitions`)) ?? '8');
    const lines: Record<string, unknown>[] = [];
    const rows: string[][] = [];
    for (const endpoint of Object.keys(endpoints).sort()) {
      let registered: RegisteredEndpoint;
      try {
        registered = JSON.parse(endpoints[endpoint] ?? '') as RegisteredEndpoint;
      } catch {
        io.stderr.write(`endpoint "${endpoint}": its registration is not JSON; skipped\n`);
        continue;
      }
      for (const spec of registered.subscriptions) {
        const queues: (Counts & { name: string })[] = [];
        for (const name of queuesOf(endpoint, spec, partitions)) {
          queues.push({ name, ...(await queueJobCounts(client, ctx.prefix, name, STATES)) });
        }
        const total: Counts = { wait: 0, active: 0, delayed: 0, failed: 0 };
        for (const q of queues) for (const s of STATES) total[s] += q[s];
        lines.push({
          endpoint,
          registeredAt: registered.registeredAt === undefined ? null : iso(registered.registeredAt),
          handler: spec.handler,
          kind: spec.kind,
          types: spec.types,
          orderedTypes: spec.orderedTypes ?? [],
          queues,
          total,
        });
        rows.push([
          endpoint,
          spec.handler,
          spec.kind,
          spec.types.join(','),
          `${queues[0]?.name ?? '-'}${queues.length > 1 ? ` (+${queues.length - 1})` : ''}`,
          String(total.wait),
          String(total.active),
          String(total.delayed),
          String(total.failed),
        ]);
      }
    }
    if (ctx.json) {
      for (const line of lines) writeJson(io.stdout, line);
    } else if (rows.length === 0) {
      io.stdout.write(`No endpoints registered under prefix ${ctx.prefix}.\n`);
    } else {
      io.stdout.write(
        formatTable(
          ['ENDPOINT', 'HANDLER', 'KIND', 'TYPES', 'QUEUE', 'WAIT', 'ACTIVE', 'DELAYED', 'FAILED'],
          rows,
        ),
      );
    }
    return ExitCode.ok;
  } finally {
    client.disconnect();
  }
}
