import { parseArgs, type ParseArgsConfig } from 'node:util';
import { durationMs } from '../clock/duration.js';
import type { DeadLetterFilter, DeadLetterStatus } from '../dead-letters/dead-letter-store.js';
import type { SystemAdmin } from '../admin/system-admin.js';
import { withTransport } from '../admin/with-transport.js';
import { HarrierError } from '../errors/harrier-error.js';
import {
  REDIS_SCOPE,
  backendFor,
  describeSchemes,
  openRabbitMqTransport,
  openRedisSystem,
  type CliScope,
} from './backends.js';
import { CliExit, ExitCode, usageError, type CliIo } from './cli-io.js';
import { checkRabbitMqUrl } from './rabbitmq-url.js';
import { isHost, isPort } from './server-url.js';
import { redactUrl } from './url-scheme.js';

/** What {@link parse} returns for `options` plus the global ones. */
export type ParsedArgs<O extends NonNullable<ParseArgsConfig['options']>> = ReturnType<
  typeof parseArgs<{
    args: string[];
    options: O & typeof GLOBAL_OPTIONS;
    allowPositionals: true;
    strict: true;
  }>
>;

/** Options every command takes. */
export const GLOBAL_OPTIONS = {
  url: { type: 'string' },
  'redis-url': { type: 'string' },
  'redis-cluster': { type: 'string' },
  'database-url': { type: 'string' },
  prefix: { type: 'string' },
  schema: { type: 'string' },
  'rabbitmq-url': { type: 'string' },
  'rabbitmq-prefix': { type: 'string' },
  'rabbitmq-ledger': { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies NonNullable<ParseArgsConfig['options']>;

/** Help text of the options every command takes. */
export const GLOBAL_HELP = `Connection and output:
  --url <url>         the Harrier system to operate; the scheme picks the backend:
                      ${describeSchemes()} (default: $HARRIER_URL)
  --redis-url <url>   the same as --url (default: $REDIS_URL)
  --redis-cluster <host:port,...>
                      a Redis Cluster instead: some of its nodes (default: $REDIS_CLUSTER)
  --database-url <url>
                      a postgres:// URL, the same as --url (default: $DATABASE_URL)
  --prefix <prefix>   Redis: key prefix of the Harrier system (default: {harrier})
  --schema <name>     PostgreSQL: schema of the Harrier system (default: $HARRIER_SCHEMA, else harrier)
  --rabbitmq-url <url>
                      the system's broker is RabbitMQ (amqp:// or amqps://): topology and replays
                      go there, the stores stay at --url (default: $RABBITMQ_URL)
  --rabbitmq-prefix <prefix>
                      RabbitMQ: name prefix of the system's exchanges and queues (default: harrier)
  --rabbitmq-ledger <store|none>
                      RabbitMQ: the delivery ledger replays go through: store, the one in the
                      stores at --url (under --prefix or --schema), or none when the system's
                      brokers run without one (default: store)
  --json              JSON lines on stdout (the default when stdout is not a terminal)
  -h, --help          show this help`;

/** Options that select dead letters. */
export const SELECTOR_OPTIONS = {
  endpoint: { type: 'string' },
  type: { type: 'string' },
  handler: { type: 'string' },
  reason: { type: 'string' },
  fingerprint: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  status: { type: 'string' },
} as const satisfies NonNullable<ParseArgsConfig['options']>;

/** Help text of {@link SELECTOR_OPTIONS}. */
export function selectorHelp(defaultStatus: string): string {
  return `Filters (each one narrows):
  --endpoint <name>   endpoint the message died in
  --type <type>       message type, e.g. orders.PlaceOrder
  --handler <name>    handler (subscription) name
  --reason <reason>   handler-failed, validation-failed, no-handler, signature-invalid, ...
  --fingerprint <fp>  failure group, as shown by \`harrier dlq groups\`
  --since <when>      last failure at or after: ISO date (2026-01-31T12:00Z) or relative (90s, 15m, 1h, 2d, 1w)
  --until <when>      last failure before: same formats
  --status <status>   dead | replayed | any (default: ${defaultStatus})`;
}

/**
 * Parses `argv` with `options` plus the global ones.
 * @throws CliExit (usage) for an unknown option or a missing value.
 */
export function parse<const O extends NonNullable<ParseArgsConfig['options']>>(
  argv: readonly string[],
  options: O,
): ParsedArgs<O> {
  try {
    return parseArgs({
      args: [...argv],
      options: { ...options, ...GLOBAL_OPTIONS },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw usageError(`${error instanceof Error ? error.message : String(error)}; see --help`);
  }
}

/** @throws CliExit (usage) when a command that takes no arguments got some. */
export function noPositionals(positionals: readonly string[], command: string): void {
  if (positionals.length > 0) {
    throw usageError(`\`${command}\` takes no arguments, got "${positionals.join(' ')}"; see --help`);
  }
}

/** A Redis Cluster node, as given to `--redis-cluster`. */
export interface ClusterSeed {
  readonly host: string;
  readonly port: number;
}

/** What every command needs: the system to open, its scope, and the output mode. */
export interface CommandContext {
  readonly io: CliIo;
  /** The backend the connection options picked, for messages: `Redis`, `PostgreSQL`. */
  readonly backend: string;
  /** Where the system is, as given (a URL, or `cluster host:port,...`); may hold a password. */
  readonly where: string;
  /** Loads the backend's layer and opens the system: see {@link openAdmin}. */
  readonly connect: () => Promise<SystemAdmin>;
  /** What names the system on its server: the Redis key prefix, the PostgreSQL schema. */
  readonly scope: string;
  /** The scope for messages: `prefix {harrier}`, `schema harrier`. */
  readonly scopeLabel: string;
  /**
   * Where the system's broker is when it is not where its stores are (`--rabbitmq-url`): its URL
   * (may hold a password) and name prefix; `connect` then takes the topology and the broker from it.
   */
  readonly transport?: {
    readonly backend: 'RabbitMQ';
    readonly where: string;
    readonly prefix: string;
    /** Whether replays go through the stores' delivery ledger (`--rabbitmq-ledger store`). */
    readonly ledger: boolean;
  };
  /** JSON lines instead of text. */
  readonly json: boolean;
}

/**
 * Parses `host:port,host:port`.
 * @param source - where the text came from, for the message: `--redis-cluster` or `REDIS_CLUSTER`.
 * @throws CliExit (usage) naming the entry that is not one.
 */
function parseSeeds(text: string, source: string): ClusterSeed[] {
  return text.split(',').map((entry) => {
    const match = /^\s*([^\s:]+|\[[^\]]+\]):(\d{1,5})\s*$/.exec(entry);
    if (match?.[1] === undefined || match[2] === undefined || !isHost(match[1]) || !isPort(match[2])) {
      throw usageError(
        `${source} entry "${entry}" is not host:port; give some nodes as host:port,host:port, e.g. 10.0.0.1:7000,10.0.0.2:7000`,
      );
    }
    return { host: match[1].replace(/^\[|\]$/g, ''), port: Number(match[2]) };
  });
}

/** The options that say where the system is; at most one of them is given. */
const CONNECTION_OPTIONS = ['url', 'redis-url', 'redis-cluster', 'database-url'] as const;

const given = (text: string | undefined): text is string => text !== undefined && text !== '';

/** The global options {@link contextOf} reads. */
export interface ConnectionValues {
  url?: string | undefined;
  'redis-url'?: string | undefined;
  'redis-cluster'?: string | undefined;
  'database-url'?: string | undefined;
  prefix?: string | undefined;
  schema?: string | undefined;
  'rabbitmq-url'?: string | undefined;
  'rabbitmq-prefix'?: string | undefined;
  'rabbitmq-ledger'?: string | undefined;
  json?: boolean | undefined;
}

/**
 * Resolves the global options: where the system is, which backend, its scope, the output mode.
 *
 * @remarks
 * Where: at most one of the flags `--url`, `--redis-url` (the same), `--redis-cluster` and
 * `--database-url` (a `postgres://` URL only); without one, `$HARRIER_URL`, else the backend's own
 * variable: `$REDIS_CLUSTER` or `$REDIS_URL` (in that order) for Redis, `$DATABASE_URL` for
 * PostgreSQL. When both a Redis variable and `$DATABASE_URL` are set (and no flag nor HARRIER_URL
 * says which), the command refuses rather than guess which system to operate on. A URL's scheme
 * picks the backend ({@link backendFor}).
 *
 * Scope: `--prefix` on Redis, `--schema` (else `$HARRIER_SCHEMA`) on PostgreSQL; the option of the
 * other backend is refused.
 *
 * Transport: with `--rabbitmq-url` (else `$RABBITMQ_URL`), the system's broker is RabbitMQ, under
 * `--rabbitmq-prefix` (default `harrier`): the admin `connect` opens takes its topology and its
 * broker from RabbitMQ (opened on first use) and its stores from the URL. An `amqp://` URL given
 * where the stores go is refused, naming `--rabbitmq-url`. Its broker replays through the delivery
 * ledger of the stores (the system's `RedisDeliveryLedger` under `--prefix`, its
 * `PostgresDeliveryLedger` in `--schema`), unless `--rabbitmq-ledger none` says the system's
 * brokers run without one.
 *
 * @throws CliExit (usage) when no system, or two connection options, or two backends' variables
 *   are given, or the URL, cluster nodes or scope are malformed, or the URL's scheme is not one a
 *   backend takes, or the RabbitMQ URL or prefix is malformed.
 */
export function contextOf(io: CliIo, values: ConnectionValues): CommandContext {
  return withRabbitMq(io, values, storesContextOf(io, values));
}

/** The default of `--rabbitmq-prefix`: the default `prefix` of RabbitMqBroker. */
const DEFAULT_RABBITMQ_PREFIX = 'harrier';

/**
 * `ctx` with its transport on RabbitMQ when `--rabbitmq-url` (else `$RABBITMQ_URL`) is given: the
 * stores stay where `ctx` opens them, the topology and the broker come from RabbitMQ.
 * @throws CliExit (usage) for a malformed RabbitMQ URL, prefix or ledger, or `--rabbitmq-prefix`
 *   or `--rabbitmq-ledger` alone.
 */
function withRabbitMq(io: CliIo, values: ConnectionValues, ctx: CommandContext): CommandContext {
  const flag = values['rabbitmq-url'];
  // An empty --rabbitmq-url turns off a RABBITMQ_URL of the environment.
  const url = flag ?? (given(io.env.RABBITMQ_URL) ? io.env.RABBITMQ_URL : undefined);
  const prefix = values['rabbitmq-prefix'];
  const ledger = values['rabbitmq-ledger'];
  if (!given(url)) {
    const alone =
      prefix !== undefined ? '--rabbitmq-prefix' : ledger !== undefined ? '--rabbitmq-ledger' : undefined;
    if (alone !== undefined) {
      throw usageError(
        `${alone} ${alone === '--rabbitmq-prefix' ? 'names the system' : 'says how replays go'} on RabbitMQ and needs --rabbitmq-url (or RABBITMQ_URL): pass the broker's URL, e.g. --rabbitmq-url amqp://guest:guest@127.0.0.1:5672`,
      );
    }
    return ctx;
  }
  if (ledger !== undefined && ledger !== 'store' && ledger !== 'none') {
    throw usageError(
      `--rabbitmq-ledger "${ledger}" is not one of store (the delivery ledger in the stores at --url, as the system's RabbitMqBrokers were given) or none (they run without a ledger)`,
    );
  }
  const useLedger = ledger !== 'none';
  checkRabbitMqUrl(url, flag !== undefined ? '--rabbitmq-url' : 'RABBITMQ_URL');
  if (prefix !== undefined && !/^[A-Za-z0-9_-]{1,100}$/.test(prefix)) {
    throw usageError(
      `--rabbitmq-prefix "${prefix}" must be 1 to 100 letters, digits, '_' or '-' (as RabbitMqBroker's prefix), e.g. harrier`,
    );
  }
  const rabbitPrefix = prefix ?? DEFAULT_RABBITMQ_PREFIX;
  return {
    ...ctx,
    connect: async () =>
      withTransport(await ctx.connect(), () => openRabbitMqTransport(url, rabbitPrefix), {
        ledger: useLedger,
      }),
    transport: { backend: 'RabbitMQ', where: url, prefix: rabbitPrefix, ledger: useLedger },
  };
}

/** The system's stores (and, without `--rabbitmq-url`, its transport): see {@link contextOf}. */
function storesContextOf(io: CliIo, values: ConnectionValues): CommandContext {
  const json = values.json === true || io.stdout.isTTY !== true;
  const flags = CONNECTION_OPTIONS.filter((option) => values[option] !== undefined);
  if (flags.length > 1) {
    throw usageError(`Pass either --${flags[0] ?? ''} or --${flags[1] ?? ''}, not both`);
  }
  const scoped = (scope: CliScope, backend: string) => {
    const other = scope.option === 'prefix' ? 'schema' : 'prefix';
    if (values[other] !== undefined) {
      throw usageError(
        `--${other} does not apply to ${backend}: it names the system with --${scope.option}${scope.option === 'schema' ? ' (a PostgreSQL schema)' : ' (a Redis key prefix)'}`,
      );
    }
    const fromFlag = values[scope.option];
    const fromEnv = scope.env === undefined ? undefined : io.env[scope.env];
    const value = fromFlag ?? (given(fromEnv) ? fromEnv : scope.default);
    scope.check(
      value,
      fromFlag !== undefined || scope.env === undefined || !given(fromEnv) ? `--${scope.option}` : scope.env,
    );
    return { scope: value, scopeLabel: `${scope.option} ${value}` };
  };
  const cluster = (text: string, source: string): CommandContext => {
    const seeds = parseSeeds(text, source);
    const { scope, scopeLabel } = scoped(REDIS_SCOPE, 'Redis');
    return {
      io,
      backend: 'Redis',
      where: `cluster ${text}`,
      connect: () => openRedisSystem({ cluster: seeds }, scope),
      scope,
      scopeLabel,
      json,
    };
  };
  const onUrl = (url: string, source: string, only?: string): CommandContext => {
    const backend = backendFor(url, source);
    if (only !== undefined && backend.name !== only) {
      throw usageError(
        `${source} takes a ${only} URL (postgres://...), and "${redactUrl(url)}" is a ${backend.name} one: pass it with --url`,
      );
    }
    const { scope, scopeLabel } = scoped(backend.scope, backend.name);
    return {
      io,
      backend: backend.name,
      where: url,
      connect: () => backend.open(url, scope),
      scope,
      scopeLabel,
      json,
    };
  };
  if (given(values.url)) return onUrl(values.url, '--url');
  if (given(values['redis-url'])) return onUrl(values['redis-url'], '--redis-url');
  if (given(values['redis-cluster'])) return cluster(values['redis-cluster'], '--redis-cluster');
  if (given(values['database-url'])) return onUrl(values['database-url'], '--database-url', 'PostgreSQL');
  if (flags.length === 0) {
    const { env } = io;
    if (given(env.HARRIER_URL)) return onUrl(env.HARRIER_URL, 'HARRIER_URL');
    const redis = given(env.REDIS_CLUSTER) ? 'REDIS_CLUSTER' : given(env.REDIS_URL) ? 'REDIS_URL' : undefined;
    if (redis !== undefined && given(env.DATABASE_URL)) {
      throw usageError(
        `Both ${redis} and DATABASE_URL are set, so the system to operate on is ambiguous: say which with --url (or HARRIER_URL), --redis-url or --database-url`,
      );
    }
    if (given(env.REDIS_CLUSTER)) return cluster(env.REDIS_CLUSTER, 'REDIS_CLUSTER');
    if (given(env.REDIS_URL)) return onUrl(env.REDIS_URL, 'REDIS_URL');
    if (given(env.DATABASE_URL)) return onUrl(env.DATABASE_URL, 'DATABASE_URL', 'PostgreSQL');
  }
  throw usageError(
    `Nothing to connect to: set HARRIER_URL or pass --url with a URL of ${describeSchemes()}, e.g. --url redis://127.0.0.1:6379 (REDIS_URL and --redis-url work too; for a Redis Cluster, REDIS_CLUSTER or --redis-cluster host:port,host:port; for PostgreSQL, DATABASE_URL and --database-url)`,
  );
}

/**
 * The system the command names, opened through its backend's layer (loaded now, with its
 * drivers): connected, and the backend answering. Close it when done.
 * @throws HarrierError `missing-dependency` when the backend's driver is not installed.
 * @throws HarrierError `<backend>-unavailable` (`redis-unavailable`, ...) when it cannot be reached.
 */
export function openAdmin(ctx: CommandContext): Promise<SystemAdmin> {
  return ctx.connect();
}

/** `--since`/`--until`: an ISO date, or a duration before `now` such as `1h` or `2d`. */
export function parseWhen(option: string, text: string, now: number): number {
  const duration = durationMs(text);
  if (duration !== undefined) return now - duration;
  const ms = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(ms)) {
    throw usageError(
      `--${option} "${text}" is neither an ISO date (2026-01-31, 2026-01-31T12:00:00Z) nor a duration (90s, 15m, 1h, 2d, 1w)`,
    );
  }
  return ms;
}

/** The dead-letter filter of the selector options. */
export function filterOf(
  values: Partial<Record<keyof typeof SELECTOR_OPTIONS, string | undefined>>,
  defaultStatus: DeadLetterStatus | 'any',
  now: number = Date.now(),
): DeadLetterFilter {
  const status = values.status ?? defaultStatus;
  if (status !== 'dead' && status !== 'replayed' && status !== 'any') {
    throw usageError(`--status "${status}" is not one of dead, replayed, any`);
  }
  return {
    status,
    ...(values.endpoint !== undefined ? { endpoint: values.endpoint } : {}),
    ...(values.type !== undefined ? { type: values.type } : {}),
    ...(values.handler !== undefined ? { handler: values.handler } : {}),
    ...(values.reason !== undefined ? { reason: values.reason } : {}),
    ...(values.fingerprint !== undefined ? { fingerprint: values.fingerprint } : {}),
    ...(values.since !== undefined ? { since: parseWhen('since', values.since, now) } : {}),
    ...(values.until !== undefined ? { until: parseWhen('until', values.until, now) } : {}),
  };
}

/** True when a filter narrows by anything but status. */
export function narrows(filter: DeadLetterFilter): boolean {
  return Object.keys(filter).some((key) => key !== 'status');
}

/** The exit for an error a command threw. */
export function exitOf(error: unknown): CliExit {
  if (error instanceof CliExit) return error;
  // Each backend names its unreachable error `<backend>-unavailable` (redis-, postgres-, ...).
  if (HarrierError.is(error) && error.code.endsWith('-unavailable')) {
    return new CliExit(ExitCode.unavailable, error.message);
  }
  if (HarrierError.is(error, 'schema-conflict')) return new CliExit(ExitCode.schemaConflict, error.message);
  if (
    HarrierError.is(error) &&
    (error.code === 'invalid-cursor' || error.code === 'invalid-argument' || error.code === 'invalid-option')
  ) {
    return new CliExit(ExitCode.usage, error.message);
  }
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return new CliExit(ExitCode.someFailed, message);
}
