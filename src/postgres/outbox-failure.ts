import { isTransientFailure } from '../dispatch/transient-failure.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { OutboxRow } from './outbox-rows.js';

/**
 * Codes that say the relay's publisher is stopping or stopped (the bus, its broker or log closing):
 * the row is fine, the relay retries once a publisher answers.
 */
const STOPPING_CODES = new Set(['broker-closed', 'bus-stopped', 'stopping', 'store-closed', 'log-closed']);

/**
 * True when a failed publish says a dependency is out (a broker or a store unreachable, the
 * publisher stopping) rather than that the row is at fault: such a failure never counts toward
 * parking the row.
 *
 * @remarks
 * The same rules as the dispatcher's outages ({@link isTransientFailure}: `redis-unavailable`,
 * `postgres-unavailable`, `transient`, socket errors, drivers' "connection closed"), plus the codes
 * of a publisher that is closing.
 */
export function isOutboxOutage(error: unknown): boolean {
  if (HarrierError.is(error) && STOPPING_CODES.has(error.code)) return true;
  return isTransientFailure(error);
}

const KINDS = new Set(['command', 'event', 'query']);

/**
 * Why `row` can never be published, or undefined when it looks sound: a kind Harrier does not know,
 * a body that is not an envelope of the row's own id, kind and type, a `deliver_at` that is not a
 * time. Read only after a publish failed, so the relay's hot path parses nothing.
 */
export function malformedOutboxRow(row: OutboxRow): string | undefined {
  if (!KINDS.has(row.kind)) return `kind "${row.kind}" is not command, event or query`;
  if (row.deliver_at !== null && !Number.isFinite(Number(row.deliver_at))) {
    return `deliver_at "${row.deliver_at}" is not a time in ms`;
  }
  let body: unknown;
  try {
    body = JSON.parse(row.body);
  } catch {
    return 'body is not JSON';
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'body is not an envelope';
  const envelope = body as { id?: unknown; kind?: unknown; type?: unknown };
  if (envelope.id !== row.message_id) return `body's id does not match message_id "${row.message_id}"`;
  if (envelope.kind !== row.kind) return `body's kind does not match kind "${row.kind}"`;
  if (envelope.type !== row.type) return `body's type does not match type "${row.type}"`;
  return undefined;
}
