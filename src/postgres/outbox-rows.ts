import type pg from 'pg';
import { traceparentOfBody } from '../messages/codec.js';
import type { OutgoingMessage } from '../messages/outgoing-message.js';
import { partitionOf } from '../messages/partition.js';
import type { PostgresTables } from './postgres-schema.js';

/**
 * How many lanes the outbox spreads its rows over. A relay owns a lane at a time (an advisory lock),
 * so rows of one lane are published in order by one relay; a message's lane comes from its partition
 * key (its id when it has none), so messages of one key keep their order.
 */
export const OUTBOX_LANES = 32;

/** The NOTIFY channel of a schema's outbox: relays LISTEN on it to wake as soon as rows commit. */
export function outboxChannel(tables: PostgresTables): string {
  return `harrier_outbox_${tables.schema}`;
}

/** The outbox lane of a message. */
export function outboxLane(message: OutgoingMessage): number {
  return partitionOf(message.partitionKey ?? message.id, OUTBOX_LANES);
}

const COLUMNS = 11;

/** An outbox row as the relay reads it. */
export interface OutboxRow {
  readonly seq: string;
  readonly message_id: string;
  readonly kind: OutgoingMessage['kind'];
  readonly type: string;
  readonly body: string;
  readonly partition_key: string | null;
  readonly ordered: boolean;
  readonly lane: number;
  readonly topic: string | null;
  readonly deliver_at: string | null;
  readonly require_route: boolean | null;
  /** Failed tries so far that count toward parking (outages never count). */
  readonly attempts: number;
}

/**
 * The message an outbox row holds, as it was when {@link writeOutboxRows} stored it; its
 * traceparent is read back from the body (no column holds it), so the relay's `send` span links to
 * the span that created each message.
 */
export function outgoingOfRow(row: OutboxRow): OutgoingMessage {
  const traceparent = traceparentOfBody(row.body);
  return {
    id: row.message_id,
    kind: row.kind,
    type: row.type,
    body: row.body,
    ...(row.partition_key !== null ? { partitionKey: row.partition_key } : {}),
    ordered: row.ordered,
    ...(traceparent !== undefined ? { traceparent } : {}),
    ...(row.topic !== null ? { topic: row.topic } : {}),
    ...(row.deliver_at !== null ? { deliverAt: Number(row.deliver_at) } : {}),
    ...(row.require_route !== null ? { requireRoute: row.require_route } : {}),
  };
}

/**
 * Inserts `messages` into the outbox in the caller's transaction (one statement) and notifies the
 * relays, whose NOTIFY PostgreSQL delivers only if the transaction commits.
 *
 * @remarks
 * `requireRoute` left undefined is stored as NULL, so the relay's publisher decides it as the bus's
 * own publish would (a command its registry handles needs no route).
 *
 * @param client - a client inside the application's transaction (BEGIN issued by the caller).
 * @param now - ms since the epoch, stored as `created_at`.
 */
export async function writeOutboxRows(
  client: pg.ClientBase,
  tables: PostgresTables,
  messages: readonly OutgoingMessage[],
  now: number,
): Promise<void> {
  if (messages.length === 0) return;
  const values: unknown[] = [];
  const rows: string[] = [];
  for (const [i, m] of messages.entries()) {
    const base = i * COLUMNS;
    rows.push(`(${Array.from({ length: COLUMNS }, (_, c) => `$${base + c + 1}`).join(', ')})`);
    values.push(
      m.id,
      m.kind,
      m.type,
      m.body,
      m.partitionKey ?? null,
      m.ordered === true,
      outboxLane(m),
      m.topic ?? null,
      m.deliverAt ?? null,
      m.requireRoute ?? null,
      now,
    );
  }
  await client.query(
    `INSERT INTO ${tables.outbox} (message_id, kind, type, body, partition_key, ordered, lane, topic, deliver_at, require_route, created_at) VALUES ${rows.join(', ')}`,
    values,
  );
  await client.query(`SELECT pg_notify($1, '')`, [outboxChannel(tables)]);
}
