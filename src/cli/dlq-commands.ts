import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Cluster, Redis } from 'ioredis';
import { z } from 'zod';
import type {
  DeadLetterFilter,
  DeadLetterRecord,
  DeadLetterStore,
} from '../dead-letters/dead-letter-store.js';
import { replayDeadLetters, type ReplayResult } from '../dead-letters/replay-dead-letters.js';
import { HarrierError } from '../errors/harrier-error.js';
import { silentLogger } from '../logging/logger.js';
import { partitionOf } from '../messages/partition.js';
import { createEnvelopeSigner, type EnvelopeSigner } from '../messages/signing.js';
import { loadRedisLayer } from '../redis/load-redis-layer.js';
import {
  SELECTOR_OPTIONS,
  GLOBAL_HELP,
  connect,
  contextOf,
  filterOf,
  narrows,
  noPositionals,
  parse,
  selectorHelp,
  type CommandContext,
} from './cli-context.js';
import {
  ExitCode,
  clip,
  formatTable,
  iso,
  nothingMatched,
  usageError,
  writeJson,
  type CliIo,
} from './cli-io.js';
import { ProgressBar, TokenBucket } from './progress.js';

export const DLQ_HELP = `Usage: harrier dlq <command> [options]

Inspect, replay and clean up dead letters kept in Redis (RedisDeadLetterStore).

Commands:
  list               list dead letters, filtered and paged
  show <id>          one dead letter: envelope, error and stack, attempts, replays
  groups             counts by failure fingerprint, with a sample id
  replay <id...>     send dead letters back to the subscription they died in (also --all or filters)
  purge              delete dead letters (ids, --all or filters; asks, or needs --yes)
  export             write dead letters as JSON lines (stdout or --out)
  import             add dead letters from JSON lines (stdin or --in)

Run \`harrier dlq <command> --help\` for its options.

${GLOBAL_HELP}
`;

const LIST_HELP = `Usage: harrier dlq list [filters] [--limit N] [--cursor C] [--json]

Lists dead letters in first-failure order, one page at a time. A table on a terminal, JSON lines
otherwise; in JSON mode a last line {"next":"<cursor>"} follows when there is another page.

  --limit <n>         records per page (default 50)
  --cursor <cursor>   continue after the page that printed this cursor

${selectorHelp('dead')}

${GLOBAL_HELP}
`;

const SHOW_HELP = `Usage: harrier dlq show <id> [--json]

Shows one dead letter: the envelope pretty-printed, the last error with its stack, the attempt
history and the replay history. Exits 4 when no dead letter has that id.

${GLOBAL_HELP}
`;

const GROUPS_HELP = `Usage: harrier dlq groups [filters] [--json]

Counts dead letters by failure fingerprint (error name + first application stack frame), largest
group first, with a sample id to \`show\`. Replay or purge a group with --fingerprint <fp>.

${selectorHelp('dead')}

${GLOBAL_HELP}
`;

const REPLAY_HELP = `Usage: harrier dlq replay (<id...> | --all | [filters]) [options]

Sends each selected dead letter back to the subscription it died in, through the broker (never
handled here): same message id, attempts reset, a replay entry recorded. Each id succeeds or fails
on its own; the exit code is 1 when any failed. Never prompts.

  --all               every dead letter matching --status (default dead)
  --dry-run           check every record and print what would be replayed; change nothing
  --rate <n>          at most n replays per second (token bucket; default unlimited)
  --concurrency <n>   replays in flight at once (default 16); one partition key stays in order
  --by <name>         recorded as who replayed (default cli:$USER, or cli)
  --signing-keys <k>  comma-separated hex keys (default $HARRIER_SIGNING_KEYS): refuse, with
                      signature-invalid, every record whose envelope no longer verifies

${selectorHelp('dead')}

${GLOBAL_HELP}
`;

const PURGE_HELP = `Usage: harrier dlq purge (<id...> | --all | [filters]) [--yes]

Deletes the selected dead letters. Asks for confirmation on a terminal; without one (a script, a
pipe) --yes is required, else it exits 2. Exits 4 when nothing matches.

  --all               every dead letter matching --status (default any)
  -y, --yes           do not ask

${selectorHelp('any')}

${GLOBAL_HELP}
`;

const EXPORT_HELP = `Usage: harrier dlq export [<id...> | --all | filters] [--out FILE]

Writes the selected dead letters as JSON lines, one complete record each (the format
\`harrier dlq import\` reads). Without a selector, exports every record. Exits 4 when nothing matches.

  --all               every dead letter matching --status (default any)
  --out <file>        write to this file instead of stdout

${selectorHelp('any')}

${GLOBAL_HELP}
`;

const IMPORT_HELP = `Usage: harrier dlq import [--in FILE]

Adds each JSON line (a record as written by \`harrier dlq export\`) to the store; a record whose id
exists is updated. Invalid lines are reported with their line number and skipped; the exit code is 1
when there were any.

  --in <file>         read this file instead of stdin

${GLOBAL_HELP}
`;

const LIST_PAGE_CHUNK = 1000;

/** Runs `harrier dlq ...`. */
export async function dlqCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'list':
      return listCommand(rest, io);
    case 'show':
      return showCommand(rest, io);
    case 'groups':
      return groupsCommand(rest, io);
    case 'replay':
      return replayCommand(rest, io);
    case 'purge':
      return purgeCommand(rest, io);
    case 'export':
      return exportCommand(rest, io);
    case 'import':
      return importCommand(rest, io);
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      io.stdout.write(DLQ_HELP);
      return sub === undefined ? ExitCode.usage : ExitCode.ok;
    default:
      throw usageError(`Unknown command "dlq ${sub}": run \`harrier dlq --help\` for the list`);
  }
}

/** The CLI's client and a store on it; `close` releases both. */
async function openStore(
  ctx: CommandContext,
): Promise<{ client: Redis | Cluster; store: DeadLetterStore; close: () => Promise<void> }> {
  const client = await connect(ctx);
  const { RedisDeadLetterStore } = await loadRedisLayer();
  const store = new RedisDeadLetterStore({ connection: client, prefix: ctx.prefix });
  return {
    client,
    store,
    close: async () => {
      await store.close();
      client.disconnect();
    },
  };
}

async function withStore<T>(
  ctx: CommandContext,
  body: (store: DeadLetterStore, client: Redis | Cluster) => Promise<T>,
): Promise<T> {
  const { client, store, close } = await openStore(ctx);
  try {
    return await body(store, client);
  } finally {
    await close();
  }
}

/** Every record matching `filter`, in store order. */
async function* allMatching(
  store: DeadLetterStore,
  filter: DeadLetterFilter,
): AsyncGenerator<DeadLetterRecord[]> {
  let cursor: string | undefined;
  do {
    const page = await store.list(filter, {
      limit: LIST_PAGE_CHUNK,
      ...(cursor !== undefined ? { cursor } : {}),
    });
    if (page.records.length > 0) yield [...page.records];
    cursor = page.next;
  } while (cursor !== undefined);
}

/** What a list line shows of a record: everything but the envelope and the histories. */
function summaryOf(record: DeadLetterRecord): Record<string, unknown> {
  return {
    id: record.id,
    messageId: record.messageId,
    kind: record.kind,
    type: record.type,
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

async function listCommand(argv: readonly string[], io: CliIo): Promise<number> {
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
  const page = await withStore(ctx, (store) =>
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
      ['ID', 'LAST FAILED', 'ENDPOINT', 'HANDLER', 'TYPE', 'REASON', 'TRIES', 'STATUS', 'ERROR'],
      page.records.map((r) => [
        r.id,
        iso(r.lastFailedAt).replace(/\.\d{3}Z$/, 'Z'),
        r.endpoint,
        r.handler ?? '-',
        r.type ?? '-',
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

async function showCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {});
  if (values.help === true) return help(io, SHOW_HELP);
  if (positionals.length !== 1)
    throw usageError('`harrier dlq show` takes exactly one dead-letter id; see --help');
  const id = positionals[0] ?? '';
  const ctx = contextOf(io, values);
  const record = await withStore(ctx, (store) => store.get(id));
  if (record === undefined) {
    throw nothingMatched(`No dead letter "${id}": list them with \`harrier dlq list --status any\``);
  }
  if (ctx.json) {
    writeJson(io.stdout, record);
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
      : record.replays.map((r) => `  ${iso(r.at)}  by ${r.by ?? '-'}`)),
    '',
    'Envelope:',
    envelope,
    '',
  ];
  io.stdout.write(lines.join('\n'));
  return ExitCode.ok;
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

async function groupsCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, SELECTOR_OPTIONS);
  if (values.help === true) return help(io, GROUPS_HELP);
  noPositionals(positionals, 'harrier dlq groups');
  const filter = filterOf(values, 'dead');
  const ctx = contextOf(io, values);
  const groups = new Map<string, Group>();
  await withStore(ctx, async (store) => {
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

/** What a selecting command was told to select. */
type Selection =
  | { readonly kind: 'ids'; readonly ids: readonly string[] }
  | { readonly kind: 'filter'; readonly filter: DeadLetterFilter };

function selectionOf(
  command: string,
  positionals: readonly string[],
  values: Partial<Record<keyof typeof SELECTOR_OPTIONS, string | undefined>> & { all?: boolean | undefined },
  defaultStatus: 'dead' | 'any',
  required: boolean,
): Selection {
  const filter = filterOf(values, defaultStatus);
  const all = values.all === true;
  if (positionals.length > 0) {
    if (all || narrows(filter) || values.status !== undefined) {
      throw usageError(
        `\`harrier dlq ${command}\` takes ids, or --all, or filters: not more than one of them`,
      );
    }
    return { kind: 'ids', ids: [...new Set(positionals)] };
  }
  if (all && narrows(filter)) {
    throw usageError(`\`harrier dlq ${command}\`: --all selects everything; drop it to use filters`);
  }
  if (required && !all && !narrows(filter)) {
    throw usageError(
      `\`harrier dlq ${command}\` needs a selection: dead-letter ids, --all, or a filter such as --endpoint or --fingerprint; see --help`,
    );
  }
  return { kind: 'filter', filter };
}

function describeSelection(selection: Selection): string {
  if (selection.kind === 'ids') return `ids ${selection.ids.join(', ')}`;
  const parts = Object.entries(selection.filter).map(([k, v]) => `${k}=${String(v)}`);
  return parts.join(' ');
}

async function replayCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...SELECTOR_OPTIONS,
    all: { type: 'boolean' },
    'dry-run': { type: 'boolean' },
    rate: { type: 'string' },
    concurrency: { type: 'string' },
    by: { type: 'string' },
    'signing-keys': { type: 'string' },
  });
  if (values.help === true) return help(io, REPLAY_HELP);
  const selection = selectionOf('replay', positionals, values, 'dead', true);
  const rate = values.rate === undefined ? undefined : positiveNumber('rate', values.rate);
  const concurrency = positiveInteger('concurrency', values.concurrency ?? '16');
  const dryRun = values['dry-run'] === true;
  const user = io.env.USER ?? io.env.USERNAME;
  const by = values.by ?? (user !== undefined && user !== '' ? `cli:${user}` : 'cli');
  const signer = signerOf(values['signing-keys'] ?? io.env.HARRIER_SIGNING_KEYS);
  const ctx = contextOf(io, values);

  return withStore(ctx, async (store, client) => {
    const records = await selectRecords(store, selection);
    const found = records.filter((r): r is DeadLetterRecord => r !== undefined);
    if (found.length === 0) {
      throw nothingMatched(`No dead letters match (${describeSelection(selection)}): nothing to replay`);
    }
    const ids = selection.kind === 'ids' ? selection.ids : found.map((r) => r.id);
    const partitions = Number((await client.get(`${ctx.prefix}:harrier:partitions`)) ?? '8');
    const { BullMqBroker } = await loadRedisLayer();
    const broker = new BullMqBroker({
      connection: ctx.cluster === undefined ? ctx.redisUrl : { cluster: [...ctx.cluster] },
      prefix: ctx.prefix,
      partitions,
      logger: silentLogger,
    });
    const refusals = new Map<string, string>();
    const verify =
      signer === undefined
        ? undefined
        : (record: DeadLetterRecord): string | undefined => {
            const why = signer.verify(record.envelope);
            if (why === undefined) return undefined;
            refusals.set(record.id, why);
            return 'signature-invalid';
          };
    const byId = new Map(found.map((r) => [r.id, r]));
    // One lane per in-flight replay; an ordered message's partition key always picks the same lane,
    // so replays of one key go back in the order they were listed.
    const lanes: string[][] = Array.from({ length: Math.min(concurrency, ids.length) }, () => []);
    ids.forEach((id, i) => {
      const record = byId.get(id);
      const lane =
        record?.ordered === true ? partitionOf(record.partitionKey ?? '', lanes.length) : i % lanes.length;
      lanes[lane]?.push(id);
    });
    const bucket = rate === undefined ? undefined : new TokenBucket(rate);
    const progress = new ProgressBar(io.stderr, ids.length, dryRun ? 'checking' : 'replaying');
    const counts = { replayed: 0, failed: 0, skipped: 0 };
    const report = (result: ReplayResult): void => {
      progress.tick();
      const record = byId.get(result.id);
      if (result.ok) {
        counts.replayed++;
        if (ctx.json) {
          progress.finish();
          writeJson(io.stdout, result);
        } else if (dryRun) {
          progress.finish();
          io.stdout.write(
            `would replay ${result.id}  ${record?.type ?? '?'} -> ${record?.endpoint ?? '?'}/${record?.handler ?? '-'}\n`,
          );
        }
        return;
      }
      const detail = refusals.get(result.id);
      const failure = detail === undefined ? result : { ...result, message: `${result.message} (${detail})` };
      if (result.error === 'already-replayed') counts.skipped++;
      else counts.failed++;
      progress.finish();
      if (ctx.json) writeJson(io.stdout, failure);
      else {
        io.stderr.write(
          `${result.error === 'already-replayed' ? 'skipped' : 'failed'} ${failure.id}: ${failure.error}: ${failure.message}\n`,
        );
      }
    };
    try {
      await Promise.all(
        lanes.map(async (lane) => {
          for (const id of lane) {
            if (bucket !== undefined) await bucket.take();
            const [result] = await replayDeadLetters({
              store,
              broker,
              ids: [id],
              by,
              dryRun,
              ...(verify !== undefined ? { verify } : {}),
            });
            if (result !== undefined) report(result);
          }
        }),
      );
    } finally {
      progress.finish();
      await broker.close();
    }
    if (ctx.json) writeJson(io.stdout, { summary: { ...counts, total: ids.length, dryRun } });
    else {
      io.stdout.write(
        dryRun
          ? `dry run: would replay ${counts.replayed}, would fail ${counts.failed}, skipped ${counts.skipped}\n`
          : `replayed ${counts.replayed}, failed ${counts.failed}, skipped ${counts.skipped}\n`,
      );
    }
    return counts.failed > 0 ? ExitCode.someFailed : ExitCode.ok;
  });
}

/** The selected records; for ids, one entry per id (undefined when missing). */
async function selectRecords(
  store: DeadLetterStore,
  selection: Selection,
): Promise<(DeadLetterRecord | undefined)[]> {
  if (selection.kind === 'ids') return Promise.all(selection.ids.map((id) => store.get(id)));
  const out: DeadLetterRecord[] = [];
  for await (const records of allMatching(store, selection.filter)) out.push(...records);
  return out;
}

function signerOf(keys: string | undefined): EnvelopeSigner | undefined {
  if (keys === undefined || keys.trim() === '') return undefined;
  try {
    return createEnvelopeSigner({
      keys: keys
        .split(',')
        .map((k) => k.trim())
        .filter((k) => k !== ''),
    });
  } catch (error) {
    if (HarrierError.is(error)) throw usageError(`--signing-keys / HARRIER_SIGNING_KEYS: ${error.message}`);
    throw error;
  }
}

async function purgeCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...SELECTOR_OPTIONS,
    all: { type: 'boolean' },
    yes: { type: 'boolean', short: 'y' },
  });
  if (values.help === true) return help(io, PURGE_HELP);
  const selection = selectionOf('purge', positionals, values, 'any', true);
  const yes = values.yes === true;
  if (!yes && io.stdin.isTTY !== true) {
    throw usageError(
      'Refusing to purge without confirmation: stdin is not a terminal, so pass --yes to delete the selected dead letters',
    );
  }
  const ctx = contextOf(io, values);
  return withStore(ctx, async (store) => {
    const matched =
      selection.kind === 'ids'
        ? (await Promise.all(selection.ids.map((id) => store.get(id)))).filter((r) => r !== undefined).length
        : await store.count(selection.filter);
    if (matched === 0) {
      throw nothingMatched(`No dead letters match (${describeSelection(selection)}): nothing to purge`);
    }
    if (!yes) {
      const answer = await ask(
        io,
        `Delete ${matched} dead letter(s) (${describeSelection(selection)})? [y/N] `,
      );
      if (!/^y(es)?$/i.test(answer.trim())) {
        io.stderr.write('Nothing deleted.\n');
        return ExitCode.ok;
      }
    }
    const purged =
      selection.kind === 'ids' ? await store.remove(selection.ids) : await store.purge(selection.filter);
    if (ctx.json) writeJson(io.stdout, { purged });
    else io.stdout.write(`purged ${purged} dead letter(s)\n`);
    return ExitCode.ok;
  });
}

async function ask(io: CliIo, question: string): Promise<string> {
  io.stderr.write(question);
  const rl = createInterface({ input: io.stdin, terminal: false });
  try {
    for await (const line of rl) return line;
    return '';
  } finally {
    rl.close();
  }
}

async function exportCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...SELECTOR_OPTIONS,
    all: { type: 'boolean' },
    out: { type: 'string' },
  });
  if (values.help === true) return help(io, EXPORT_HELP);
  const selection = selectionOf('export', positionals, values, 'any', false);
  const ctx = contextOf(io, values);
  return withStore(ctx, async (store) => {
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

const errorInfoSchema = z.object({
  name: z.string(),
  message: z.string(),
  code: z.string().optional(),
  stack: z.string().optional(),
});

const recordSchema = z.object({
  id: z.string().min(1),
  messageId: z.string().optional(),
  kind: z.enum(['command', 'event', 'query']).optional(),
  type: z.string().optional(),
  endpoint: z.string().min(1),
  handler: z.string().optional(),
  reason: z.string().min(1),
  error: errorInfoSchema,
  attempts: z.array(z.object({ attempt: z.number(), at: z.number(), error: errorInfoSchema })),
  attemptCount: z.number().int().nonnegative(),
  firstFailedAt: z.number(),
  lastFailedAt: z.number(),
  fingerprint: z.string(),
  envelope: z.string(),
  partitionKey: z.string().optional(),
  ordered: z.boolean(),
  status: z.enum(['dead', 'replayed']),
  replays: z.array(z.object({ at: z.number(), by: z.string().optional() })),
});

/** A validated line as the store's record type (optional fields present as undefined). */
function toRecord(parsed: z.output<typeof recordSchema>): DeadLetterRecord {
  return {
    ...parsed,
    messageId: parsed.messageId,
    kind: parsed.kind,
    type: parsed.type,
    handler: parsed.handler,
    partitionKey: parsed.partitionKey,
    error: errorOf(parsed.error),
    attempts: parsed.attempts.map((a) => ({ attempt: a.attempt, at: a.at, error: errorOf(a.error) })),
    replays: parsed.replays.map((r) => (r.by === undefined ? { at: r.at } : { at: r.at, by: r.by })),
  };
}

function errorOf(e: z.output<typeof errorInfoSchema>): DeadLetterRecord['error'] {
  return {
    name: e.name,
    message: e.message,
    ...(e.code !== undefined ? { code: e.code } : {}),
    ...(e.stack !== undefined ? { stack: e.stack } : {}),
  };
}

async function importCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, { in: { type: 'string' } });
  if (values.help === true) return help(io, IMPORT_HELP);
  noPositionals(positionals, 'harrier dlq import');
  const ctx = contextOf(io, values);
  return withStore(ctx, async (store) => {
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
      const result = recordSchema.safeParse(parsed);
      if (!result.success) {
        const issues = result.error.issues.map((i) => `${i.path.join('.') || '(record)'}: ${i.message}`);
        invalid.push({ line: lineNo, error: `not a dead-letter record: ${issues.join('; ')}` });
        continue;
      }
      batch.push(store.add(toRecord(result.data)).then(() => imported++));
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

function help(io: CliIo, text: string): number {
  io.stdout.write(text);
  return ExitCode.ok;
}

function positiveInteger(option: string, text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1) {
    throw usageError(`--${option} "${text}" must be a whole number from 1`);
  }
  return n;
}

function positiveNumber(option: string, text: string): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0) throw usageError(`--${option} "${text}" must be a number above 0`);
  return n;
}
