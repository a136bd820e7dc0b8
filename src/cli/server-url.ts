import { isIPv6 } from 'node:net';

/** A host name or IPv4 address: dot-separated labels of letters, digits, '-' and '_'. */
const HOST_NAME = /^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?$/;

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
 * Parses a server URL whose scheme was checked (Redis or PostgreSQL), checking on the way what
 * `new URL` lets through or words badly: the port, and the percent escapes of the user name and
 * password. The host is left to the caller (each server has its own rules for it).
 *
 * @param scheme - the URL's scheme, as schemeOf read it
 * @param example - a valid URL of this kind, `e.g. …`, for the fixes
 * @param fail - throws the usage error of the caller's URL kind
 */
export function parseServerUrl(
  text: string,
  scheme: string,
  example: string,
  fail: (problem: string, fix: string) => never,
): URL {
  // Host and port: after the scheme, before the path, after the last '@' (a raw '@' in a password).
  const authority = (text.slice(scheme.length + 3).split(/[/?#]/, 1)[0] ?? '').replace(/^.*@/, '');
  const port = /:([^:\]]*)$/.exec(authority)?.[1];
  if (port !== undefined && port !== '' && !isPort(port)) {
    fail(`port "${port}" is not a number from 1 to 65535`, `write the port in digits, ${example}`);
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    fail('it cannot be parsed as a URL', `check the host and the percent escapes, ${example}`);
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
  return url;
}
