import { parseArgs, type ParseArgsConfig } from 'node:util';
import { durationMs } from '../clock/duration.js';
import type { DeadLetterFilter, DeadLetterStatus } from '../dead-letters/dead-letter-store.js';
import { HarrierError } from '../errors/harrier-error.js';
import { loadRedisLayer } from '../redis/load-redis-layer.js';
import type { RedisAdmin } from '../redis/redis-admin.js';
import type { RedisConnectionOptions } from '../redis/redis-connection.js';
import { CliExit, ExitCode, usageError, type CliIo } from './cli-io.js';
import { checkRedisUrl, isHost, isPort } from './redis-url.js';

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
  'redis-url': { type: 'string' },
  'redis-cluster': { type: 'string' },
  prefix: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies NonNullable<ParseArgsConfig['options']>;

/** Help text of the options every command takes. */
export const GLOBAL_HELP = `Connection and output:
  --redis-url <url>   Redis to use (default: $REDIS_URL)
  --redis-cluster <host:port,...>
                      a Redis Cluster instead: some of its nodes (default: $REDIS_CLUSTER)
  --prefix <prefix>   key prefix of the Harrier system (default: {harrier})
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

/** What every command needs: where Redis is, the prefix, and the output mode. */
export interface CommandContext {
  readonly io: CliIo;
  /** Where Redis is: the URL, or `{ cluster: seeds }`, as the Redis layer takes it. */
  readonly connection: RedisConnectionOptions;
  readonly prefix: string;
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

/**
 * Resolves the global options.
 * @throws CliExit (usage) when no Redis, or two kinds of Redis, are given, or the Redis URL or
 *   cluster nodes are malformed.
 */
export function contextOf(
  io: CliIo,
  values: {
    'redis-url'?: string | undefined;
    'redis-cluster'?: string | undefined;
    prefix?: string | undefined;
    json?: boolean | undefined;
  },
): CommandContext {
  const prefix = values.prefix ?? '{harrier}';
  if (prefix === '' || prefix.includes(':')) {
    throw usageError(`--prefix "${prefix}" must be non-empty and without ':', e.g. {harrier}`);
  }
  const json = values.json === true || io.stdout.isTTY !== true;
  if (values['redis-url'] !== undefined && values['redis-cluster'] !== undefined) {
    throw usageError('Pass either --redis-url or --redis-cluster, not both');
  }
  const clusterText =
    values['redis-cluster'] ?? (values['redis-url'] === undefined ? io.env.REDIS_CLUSTER : undefined);
  if (clusterText !== undefined && clusterText !== '') {
    const source = values['redis-cluster'] === undefined ? 'REDIS_CLUSTER' : '--redis-cluster';
    const cluster = parseSeeds(clusterText, source);
    return { io, connection: { cluster }, prefix, json };
  }
  const redisUrl = values['redis-url'] ?? io.env.REDIS_URL;
  if (redisUrl === undefined || redisUrl === '') {
    throw usageError(
      'No Redis to connect to: set REDIS_URL or pass --redis-url redis://host:6379 (for a Redis Cluster, REDIS_CLUSTER or --redis-cluster host:port,host:port)',
    );
  }
  checkRedisUrl(redisUrl, values['redis-url'] === undefined ? 'REDIS_URL' : '--redis-url');
  return { io, connection: redisUrl, prefix, json };
}

/**
 * The Redis layer's view of the system the command names: connected, and Redis answering PING.
 * Close it when done.
 * @throws HarrierError `missing-dependency` when bullmq or ioredis is not installed.
 * @throws HarrierError `redis-unavailable` when Redis cannot be reached.
 */
export async function openAdmin(ctx: CommandContext): Promise<RedisAdmin> {
  const { openRedisAdmin } = await loadRedisLayer();
  return openRedisAdmin(ctx.connection, { prefix: ctx.prefix });
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
  if (
    HarrierError.is(error) &&
    (error.code === 'redis-unavailable' || error.code === 'postgres-unavailable')
  ) {
    return new CliExit(ExitCode.redisUnavailable, error.message);
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
