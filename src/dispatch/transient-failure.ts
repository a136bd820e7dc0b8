import { HarrierError } from '../errors/harrier-error.js';

/**
 * Decides whether a failure is an outage of a dependency (true) rather than a failure of the message
 * (false, or undefined to leave it to Harrier's own rules).
 */
export type TransientClassifier = (error: unknown) => boolean | undefined;

/** Harrier's own codes that say a dependency is unreachable, not that the message is wrong. */
const TRANSIENT_CODES = new Set([
  'transient',
  'postgres-unavailable',
  'rabbitmq-unavailable',
  'redis-unavailable',
]);

/** Node's socket errors: the peer refused, reset, timed out or could not be found. */
const SOCKET_ERRNOS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * PostgreSQL SQLSTATEs of a server going away or refusing sessions: connection exceptions (class
 * 08), admin/crash shutdown and "cannot connect now" (57P01-57P03), too many connections (53300).
 */
function isUnavailableSqlState(code: string): boolean {
  return (
    code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300'
  );
}

/**
 * What drivers say when their connection is gone, where they give no code: node-postgres ("Connection
 * terminated", "Client was closed and is not queryable", a pool's connect time-out) and ioredis
 * ("Connection is closed.", a command refused while offline, its retry limit per request).
 */
const UNAVAILABLE_MESSAGE =
  /Connection terminated|Client was closed and is not queryable|Client has encountered a connection error|timeout exceeded when trying to connect|Connection is closed|Stream isn't writeable|max retries per request/i;

/** How deep the `cause` chain is followed (a cycle must not loop). */
const MAX_CAUSE_DEPTH = 8;

/**
 * True when `error`, or an error in its `cause` chain (or among an `AggregateError`'s errors), says a
 * dependency is unreachable: a {@link TransientError}, Harrier's `postgres-unavailable` and
 * `redis-unavailable`, a socket error (ECONNREFUSED, ECONNRESET, ETIMEDOUT, ...), a PostgreSQL
 * connection SQLSTATE, or a driver's "connection closed" message.
 *
 * @remarks
 * A time-out of the handler itself (`handler-timeout`) is a message failure: a hung call is as likely
 * the message's fault as a dependency's, and treating it as an outage would pause an endpoint on one
 * bad message. A user's `classify` answers first; `undefined` from it falls back to these rules.
 */
export function isTransientFailure(error: unknown, classify?: TransientClassifier): boolean {
  if (classify !== undefined) {
    let verdict: boolean | undefined;
    try {
      verdict = classify(error);
    } catch {
      verdict = undefined;
    }
    if (verdict !== undefined) return verdict;
  }
  return matches(error, 0);
}

function matches(error: unknown, depth: number): boolean {
  if (depth > MAX_CAUSE_DEPTH || typeof error !== 'object' || error === null) return false;
  if (HarrierError.is(error)) {
    if (TRANSIENT_CODES.has(error.code)) return true;
  } else {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && (SOCKET_ERRNOS.has(code) || isUnavailableSqlState(code))) return true;
    if (error instanceof Error) {
      if (error.name === 'MaxRetriesPerRequestError') return true;
      if (UNAVAILABLE_MESSAGE.test(error.message)) return true;
    }
  }
  if (error instanceof AggregateError && error.errors.some((inner) => matches(inner, depth + 1))) return true;
  return matches((error as { cause?: unknown }).cause, depth + 1);
}
