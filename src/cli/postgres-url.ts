import { usageError } from './cli-io.js';
import { isHost, isPort } from './redis-url.js';
import { redactUrl, schemeOf } from './url-scheme.js';

const EXAMPLE = 'e.g. postgres://app:secret@db.example.com:5432/app';

/**
 * Checks a PostgreSQL URL given to the CLI before anything connects, so a malformed one is a usage
 * error (exit 2) naming where it came from and the fix, not a failure of the command.
 *
 * @param source - where the URL came from, for the message: `--database-url`, `DATABASE_URL`, `--url`.
 * @throws CliExit (usage) when `text` is not a `postgres://` or `postgresql://` URL with a host (or
 *   a Unix socket directory as `?host=/run/postgresql`), an optional port of 1 to 65535, and a user
 *   name and password whose percent escapes decode.
 */
export function checkPostgresUrl(text: string, source: string): void {
  function fail(problem: string, fix: string): never {
    throw usageError(`${source} "${redactUrl(text)}" is not a valid PostgreSQL URL: ${problem}; ${fix}`);
  }
  const scheme = schemeOf(text);
  if (scheme !== 'postgres' && scheme !== 'postgresql') {
    fail(
      scheme === undefined ? 'it has no scheme' : `unknown scheme "${scheme}://"`,
      `start it with postgres:// (or postgresql://), ${EXAMPLE}`,
    );
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
  const socket = url.searchParams.get('host');
  if (url.hostname === '' ? socket === null || socket === '' : !isHost(url.hostname)) {
    fail(
      url.hostname === '' ? 'it has no host' : `host "${url.hostname}" is not a host name or IP address`,
      `give a host name or an IP address (IPv6 in brackets), or a socket directory as ?host=/run/postgresql, ${EXAMPLE}`,
    );
  }
}
