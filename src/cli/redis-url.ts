import { usageError } from './cli-io.js';
import { isHost, parseServerUrl } from './server-url.js';
import { redactUrl, schemeOf } from './url-scheme.js';

const EXAMPLE = 'e.g. redis://127.0.0.1:6379 or rediss://:password@redis.example.com:6380/0';

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
  const url = parseServerUrl(text, scheme, EXAMPLE, fail);
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
