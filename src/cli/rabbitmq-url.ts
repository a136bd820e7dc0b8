import { usageError } from './cli-io.js';
import { isHost, parseServerUrl } from './server-url.js';
import { redactUrl, schemeOf } from './url-scheme.js';

const EXAMPLE = 'e.g. amqp://guest:guest@127.0.0.1:5672 or amqps://app:secret@rabbit.example.com/vhost';

/** The schemes of a RabbitMQ URL, lower case and without `://`. */
export const RABBITMQ_SCHEMES: readonly string[] = ['amqp', 'amqps'];

/**
 * Checks a RabbitMQ URL given to the CLI (`--rabbitmq-url`, `RABBITMQ_URL`) before anything
 * connects, so a malformed one is a usage error (exit 2) naming where it came from and the fix.
 *
 * @param source - where the URL came from, for the message.
 * @throws CliExit (usage) when `text` is not an `amqp://` or `amqps://` URL with a host, an optional
 *   port of 1 to 65535, and a user name and password whose percent escapes decode.
 */
export function checkRabbitMqUrl(text: string, source: string): void {
  function fail(problem: string, fix: string): never {
    throw usageError(`${source} "${redactUrl(text)}" is not a valid RabbitMQ URL: ${problem}; ${fix}`);
  }
  const scheme = schemeOf(text);
  if (scheme === undefined || !RABBITMQ_SCHEMES.includes(scheme)) {
    fail(
      scheme === undefined ? 'it has no scheme' : `unknown scheme "${scheme}://"`,
      `start it with amqp:// (or amqps:// for TLS), ${EXAMPLE}`,
    );
  }
  const url = parseServerUrl(text, scheme, EXAMPLE, fail);
  if (!isHost(url.hostname)) {
    fail(
      url.hostname === '' ? 'it has no host' : `host "${url.hostname}" is not a host name or IP address`,
      `give a host name or an IP address (IPv6 in brackets), ${EXAMPLE}`,
    );
  }
}
