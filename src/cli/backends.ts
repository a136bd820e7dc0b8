import type { SystemAdmin } from '../admin/system-admin.js';
import type { TransportAdmin } from '../admin/transport-admin.js';
import { loadPostgresLayer } from '../postgres/load-postgres-layer.js';
import { loadRabbitMqLayer } from '../rabbitmq/load-rabbitmq-layer.js';
import { loadRedisLayer } from '../redis/load-redis-layer.js';
import type { RedisConnectionOptions } from '../redis/redis-connection.js';
import { usageError } from './cli-io.js';
import { checkPostgresUrl } from './postgres-url.js';
import { RABBITMQ_SCHEMES } from './rabbitmq-url.js';
import { checkRedisUrl } from './redis-url.js';
import { redactUrl, schemeOf } from './url-scheme.js';

/** A backend the `harrier` CLI operates a Harrier system on, picked by the scheme of its URL. */
export interface CliBackend {
  /** Its name in help and messages: `Redis`. */
  readonly name: string;
  /** The URL schemes that pick it, lower case and without `://`. */
  readonly schemes: readonly string[];
  /** Whether a path without a scheme (a Unix socket, `/run/redis.sock`) picks it. */
  readonly socketPaths?: boolean;
  /** A URL of it, for messages. */
  readonly example: string;
  /**
   * Checks a URL that picked this backend before anything connects.
   * @param source - where the URL came from, for the message: `--url`, `HARRIER_URL`, ...
   * @throws CliExit (usage) naming `source`, the problem and the fix.
   */
  check(url: string, source: string): void;
  /**
   * What names one Harrier system on this backend: the option that takes it (`prefix` on Redis,
   * `schema` on PostgreSQL), the environment variable read when the option is not given, and the
   * default.
   */
  readonly scope: CliScope;
  /**
   * Loads the backend's layer, drivers included, and opens the system named `scope` (its
   * {@link CliBackend.scope}: a key prefix, a schema).
   * @throws HarrierError `missing-dependency` when a driver is not installed, `<backend>-unavailable`
   *   when the backend cannot be reached.
   */
  open(url: string, scope: string): Promise<SystemAdmin>;
}

/** How a backend names one Harrier system among several on one server. */
export interface CliScope {
  /** The global option that takes it, without `--`. */
  readonly option: 'prefix' | 'schema';
  /** The environment variable read when the option is not given, if any. */
  readonly env?: string;
  /** The value when neither is given. */
  readonly default: string;
  /**
   * Checks a value before anything connects.
   * @throws CliExit (usage) naming the option and the fix.
   */
  check(value: string, source: string): void;
}

/** The Redis key prefix: `--prefix`, default `{harrier}`. */
export const REDIS_SCOPE: CliScope = {
  option: 'prefix',
  default: '{harrier}',
  check(value, source) {
    if (value === '' || value.includes(':')) {
      throw usageError(`${source} "${value}" must be non-empty and without ':', e.g. {harrier}`);
    }
  },
};

/**
 * The PostgreSQL schema: `--schema`, else `$HARRIER_SCHEMA`, default `harrier` (the default of every
 * PostgreSQL part).
 */
export const POSTGRES_SCOPE: CliScope = {
  option: 'schema',
  env: 'HARRIER_SCHEMA',
  default: 'harrier',
  // The PostgreSQL layer checks the name when it opens the system (`invalid-option`, exit 2): its
  // rule lives there, and the CLI loads that layer only to connect.
  check: () => undefined,
};

/**
 * Opens the Harrier system under `prefix` on Redis (a URL, or a Redis Cluster's seed nodes),
 * loading bullmq and ioredis only now.
 */
export async function openRedisSystem(
  connection: RedisConnectionOptions,
  prefix: string,
): Promise<SystemAdmin> {
  const { openRedisAdmin } = await loadRedisLayer();
  return openRedisAdmin(connection, { prefix });
}

/**
 * Opens the Harrier system in `schema` on PostgreSQL, loading pg only now.
 */
export async function openPostgresSystem(url: string, schema: string): Promise<SystemAdmin> {
  const { openPostgresAdmin } = await loadPostgresLayer();
  return openPostgresAdmin(url, { schema });
}

/**
 * Opens the transport of the Harrier system under `prefix` on RabbitMQ (its registered topology and
 * a broker to replay through), loading amqplib only now.
 */
export async function openRabbitMqTransport(url: string, prefix: string): Promise<TransportAdmin> {
  const { openRabbitMqAdmin } = await loadRabbitMqLayer();
  return openRabbitMqAdmin(url, { prefix });
}

/**
 * Every backend the CLI knows. Adding one is one entry: its schemes, a check of its URLs, and an
 * `open` that loads its layer with `import()` when a command connects, so that the CLI never loads
 * a driver it does not use and `--help` needs none.
 */
export const BACKENDS: readonly CliBackend[] = [
  {
    name: 'Redis',
    schemes: ['redis', 'rediss'],
    socketPaths: true,
    example: 'redis://127.0.0.1:6379',
    check: checkRedisUrl,
    scope: REDIS_SCOPE,
    open: openRedisSystem,
  },
  {
    name: 'PostgreSQL',
    schemes: ['postgres', 'postgresql'],
    example: 'postgres://user:password@127.0.0.1:5432/app',
    check: checkPostgresUrl,
    scope: POSTGRES_SCOPE,
    open: openPostgresSystem,
  },
];

/** The schemes that work, for help and messages: `redis:// or rediss:// (Redis)`. */
export function describeSchemes(backends: readonly CliBackend[] = BACKENDS): string {
  return backends
    .map((backend) => `${backend.schemes.map((scheme) => `${scheme}://`).join(' or ')} (${backend.name})`)
    .join(', ');
}

/**
 * The backend the scheme of `url` picks, once its URL check passed.
 *
 * @param source - where the URL came from, for messages: `--url`, `HARRIER_URL`, `--redis-url`, `REDIS_URL`.
 * @throws CliExit (usage) naming `source` and the schemes that work when `url` has no scheme or one
 *   no backend takes, or what the backend's check refuses; for an `amqp://` URL, naming
 *   `--rabbitmq-url` (RabbitMQ holds no stores).
 */
export function backendFor(
  url: string,
  source: string,
  backends: readonly CliBackend[] = BACKENDS,
): CliBackend {
  const scheme = schemeOf(url);
  if (scheme !== undefined && RABBITMQ_SCHEMES.includes(scheme)) {
    const redacted = redactUrl(url);
    throw usageError(
      `${source} "${redacted}" is a RabbitMQ URL, and RabbitMQ carries only the messages of a Harrier system: its dead letters, sagas, checkpoints and schedules are in Redis or PostgreSQL. Give the stores' URL with --url (e.g. redis://127.0.0.1:6379 or postgres://...) and RabbitMQ's with --rabbitmq-url ${redacted}`,
    );
  }
  const backend = url.startsWith('/')
    ? backends.find((b) => b.socketPaths === true)
    : backends.find((b) => scheme !== undefined && b.schemes.includes(scheme));
  if (backend === undefined) {
    const first = backends[0];
    const example =
      first === undefined
        ? ''
        : `, e.g. ${scheme === undefined && /^[^/:@]+:\d+$/.test(url) ? `${first.schemes[0] ?? ''}://${url}` : first.example}`;
    throw usageError(
      `${source} "${redactUrl(url)}" is not a valid URL: ${scheme === undefined ? 'it has no scheme' : `unknown scheme "${scheme}://"`}; use ${describeSchemes(backends)}${example}`,
    );
  }
  backend.check(url, source);
  return backend;
}
