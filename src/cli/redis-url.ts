import { isIPv6 } from 'node:net';
import { usageError } from './cli-io.js';
import { redactUrl, schemeOf } from './url-scheme.js';

/** A host name or IPv4 address: dot-separated labels of letters, digits, '-' and '_'. */
const HOST_NAME = /^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?$/;
const EXAMPLE = 'e.g. redis://127.0.0.1:6379 or rediss://:password@redis.example.com:6380/0';

/** True for a host the CLI can connect to: a host name, an IPv4 address, or an IPv6 one in brackets. */
export function isHost(host: string): boolean {
  return host.startsWith('[') && host.endsWith(']') ? isIPv6(host.slice(1, -1)) : HOST_NAME.test(host);
}

/** True for a TCP port number, 1 to 65535, written in decimal digits. */
export function isPort(text: string): boolean {
  const port = Number(text);
  return /^\d{1,5}$/.test(text) && port >= 1 && port <= 65_535;
}

/**
 * Checks a Redis URL given to the CLI before anything connects, so a malformed one is a usage error
 * (exit 2) naming where it came from and the fix, not a failure of the command.
 *
 * @param source - where the URL came from, for the message: `--redis-url` or `REDIS_URL`.
 * @throws CliExit (usage) when `text` is neither a `redis://` or `rediss://` URL (a host, an optional
 *   port of 1 to 65535, a user name and password whose percent escapes decode, an optional database
 *   number) nor a Unix socket path (`/run/redis.sock`, optionally `?db=<n>`).
 */
export function checkRedisUrl(text: string, source: string): void {
  function fail(problem: string, fix: string): never {
    throw usageError(`${source} "${redactUrl(text)}" is not a valid Redis URL: ${problem}; ${fix}`);
  }
  if (text.startsWith('/')) {
    // A Unix socket path, as ioredis takes it, with an optional ?db=<n>.
    checkDatabase(new URLSearchParams(text.slice(text.indexOf('?') + 1 || text.length)).get('db'), fail);
    return;
  }
  const scheme = schemeOf(text);
  if (scheme === undefined) {
    fail(
      'it has no scheme',
      /^[^/:@]+:\d+$/.test(text)
        ? `write redis://${text}`
        : `start it with redis:// or rediss:// (or give a Unix socket path), ${EXAMPLE}`,
    );
  }
  if (scheme !== 'redis' && scheme !== 'rediss') {
    fail(`unknown scheme "${scheme}://"`, `use redis:// (or rediss:// for TLS), ${EXAMPLE}`);
  }
  // Host and port: after the scheme, before the path, after the last '@' (a raw '@' in a password).
  const authority = (text.slice(scheme.length + 3).split(/[/?#]/, 1)[0] ?? '').replace(/^.*@/, '');
  const port = /:([^:\]]*)$/.exec(authority)?.[1];
  if (port !== undefined && port !== '' && !isPort(port)) {
    fail(`port "${port}" is not a number from 1 to 65535`, `write the port in digits, ${EXAMPLE}`);
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    fail('it cannot be parsed as a URL', `check the host and the percent escapes, ${EXAMPLE}`);
  }
  for (const [part, value] of [
    ['user name', url.username],
    ['password', url.password],
  ] as const) {
    try {
      decodeURIComponent(value);
    } catch {
      fail(
        `the ${part} has a bad percent escape`,
        'write % as %25 and other special characters as %XX (e.g. @ as %40, : as %3A)',
      );
    }
  }
  if (!isHost(url.hostname)) {
    fail(
      url.hostname === '' ? 'it has no host' : `host "${url.hostname}" is not a host name or IP address`,
      `give a host name or an IP address (IPv6 in brackets), ${EXAMPLE}`,
    );
  }
  checkDatabase(url.pathname === '' || url.pathname === '/' ? null : url.pathname.slice(1), fail);
  checkDatabase(url.searchParams.get('db'), fail);
}

/** A database number, when one is given, is decimal digits. */
function checkDatabase(value: string | null, fail: (problem: string, fix: string) => never): void {
  if (value !== null && !/^\d+$/.test(value)) {
    fail(`database "${value}" is not a number`, 'give a database number, e.g. redis://127.0.0.1:6379/0');
  }
}
