import { subscriptionDeadLetters } from '../admin/subscription-dead-letters.js';
import { GLOBAL_HELP, contextOf, noPositionals, openAdmin, parse } from './cli-context.js';
import { ExitCode, formatTable, iso, writeJson, type CliIo } from './cli-io.js';

export const TOPOLOGY_HELP = `Usage: harrier topology [--json]

Lists every endpoint registered under the prefix (by its processes' brokers), its subscriptions,
the depth of each subscription's queues (waiting, active, delayed), partition queues of ordered
types included (those an endpoint's ordered command types share in one more row, handler
"(ordered commands)"), and the dead letters the dead-letter store holds for each subscription.

With --rabbitmq-url, the endpoints and queues are those the system's RabbitMqBrokers registered
in RabbitMQ (under --rabbitmq-prefix), and the dead letters those of the store at --url. RabbitMQ
tells the ready messages of a queue (WAITING), not those delivered and not acknowledged (ACTIVE
shows 0).

${GLOBAL_HELP}
`;

/** Runs `harrier topology`. */
export async function topologyCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) {
    io.stdout.write(TOPOLOGY_HELP);
    return ExitCode.ok;
  }
  noPositionals(positionals, 'harrier topology');
  const ctx = contextOf(io, values);
  const admin = await openAdmin(ctx);
  try {
    const topology = await admin.topology();
    const store = admin.deadLetterStore();
    for (const endpoint of topology.unreadable ?? []) {
      io.stderr.write(`endpoint "${endpoint}": its registration is not JSON; skipped\n`);
    }
    if (topology.note !== undefined) io.stderr.write(`note: ${topology.note}\n`);
    const lines: Record<string, unknown>[] = [];
    const rows: string[][] = [];
    for (const { endpoint, registeredAt, subscriptions } of topology.endpoints) {
      for (const { subscription: spec, queues, total } of subscriptions) {
        const deadLetters = await subscriptionDeadLetters(store, endpoint, spec);
        lines.push({
          endpoint,
          registeredAt: registeredAt === undefined ? null : iso(registeredAt),
          handler: spec.handler,
          kind: spec.kind,
          types: spec.types,
          orderedTypes: spec.orderedTypes ?? [],
          queues,
          total,
          deadLetters,
        });
        rows.push([
          endpoint,
          spec.handler,
          spec.kind,
          spec.types.join(','),
          `${queues[0]?.queue ?? '-'}${queues.length > 1 ? ` (+${queues.length - 1})` : ''}`,
          String(total.waiting),
          String(total.active),
          String(total.delayed),
          String(deadLetters),
        ]);
      }
    }
    if (ctx.json) {
      for (const line of lines) writeJson(io.stdout, line);
    } else if (rows.length === 0) {
      const under =
        ctx.transport === undefined
          ? ctx.scopeLabel
          : `${ctx.transport.backend} prefix ${ctx.transport.prefix}`;
      io.stdout.write(`No endpoints registered under ${under}.\n`);
    } else {
      io.stdout.write(
        formatTable(
          ['ENDPOINT', 'HANDLER', 'KIND', 'TYPES', 'QUEUE', 'WAITING', 'ACTIVE', 'DELAYED', 'DEAD LETTERS'],
          rows,
        ),
      );
    }
    return ExitCode.ok;
  } finally {
    await admin.close();
  }
}
