import { usageError } from './cli-io.js';
import { isHost, parseServerUrl } from './server-url.js';
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
  const url = parseServerUrl(text, scheme, EXAMPLE, fail);
  const socket = url.searchParams.get('host');
  if (url.hostname === '' ? socket === null || socket === '' : !isHost(url.hostname)) {
    fail(
      url.hostname === '' ? 'it has no host' : `host "${url.hostname}" is not a host name or IP address`,
      `give a host name or an IP address (IPv6 in brackets), or a socket directory as ?host=/run/postgresql, ${EXAMPLE}`,
    );
  }
}
