import { parseAttemptHistory, parsePendingDeadLetter } from '../../broker/delivery-facts.js';
import type { Delivery } from '../../broker/message-broker.js';
import type { MessageKind } from '../../messages/definition.js';

/** A row of the broker's queue as a take returns it (bigint columns as text, as pg reads them). */
export interface TakenRow {
  readonly seq: string;
  readonly queue: string;
  readonly lane: string;
  readonly handler: string | null;
  readonly message_id: string;
  readonly kind: string;
  readonly type: string;
  readonly body: Buffer;
  readonly partition_key: string | null;
  readonly order_key: string | null;
  readonly attempt: number;
  readonly unsettled_ends: number;
  readonly history: unknown;
  readonly pending_dead_letter: unknown;
  readonly replay_of: string | null;
  readonly delivery: string;
}

/** The columns a take returns, in {@link TakenRow}'s names. */
export const TAKEN_COLUMNS =
  'q.seq, q.queue, q.lane, q.handler, q.message_id, q.kind, q.type, q.body, q.partition_key, q.order_key, q.attempt, q.unsettled_ends, q.history, q.pending_dead_letter, q.replay_of, q.delivery';

/** A delivery id: the row and the token of this delivery of it, `<seq>:<uuid>`. */
export function deliveryIdOf(seq: string, token: string): string {
  return `${seq}:${token}`;
}

const DELIVERY_ID = /^(\d{1,19}):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/** The row and token of a delivery id; undefined for anything this broker never handed out. */
export function parseDeliveryId(id: string): { readonly seq: string; readonly token: string } | undefined {
  const match = DELIVERY_ID.exec(id);
  if (match === null) return undefined;
  return { seq: match[1] ?? '', token: match[2] ?? '' };
}

const KINDS = new Set<string>(['command', 'event', 'query']);

/** What a taken row was read as: the delivery, and the facts that could not be read. */
export interface ReadRow {
  readonly delivery: Delivery;
  /** Names of malformed fields dropped (a row written by hand or by another version). */
  readonly dropped: readonly string[];
}

/**
 * The delivery of a taken row to `endpoint`; never throws: facts that cannot be read (the table is
 * not covered by the envelope's signature) are dropped and named, as the other brokers do.
 */
export function deliveryOfRow(row: TakenRow, endpoint: string): ReadRow {
  const dropped: string[] = [];
  const history = parseAttemptHistory(row.history);
  if (history.dropped > 0) dropped.push('history');
  const pendingDeadLetter = parsePendingDeadLetter(row.pending_dead_letter);
  if (pendingDeadLetter === undefined && row.pending_dead_letter !== null)
    dropped.push('pending_dead_letter');
  const kind = KINDS.has(row.kind) ? (row.kind as MessageKind) : undefined;
  if (kind === undefined) dropped.push('kind');
  return {
    dropped,
    delivery: {
      id: deliveryIdOf(row.seq, row.delivery),
      body: row.body.toString('utf8'),
      facts: {
        messageId: row.message_id,
        kind,
        type: kind === undefined ? undefined : row.type,
        endpoint,
        handler: row.handler ?? undefined,
        attempt: Math.max(1, row.attempt),
        unsettledEnds: Math.max(0, row.unsettled_ends),
        history: history.history,
        partitionKey: row.partition_key ?? undefined,
        queue: row.queue,
        replayOf: row.replay_of ?? undefined,
        pendingDeadLetter,
      },
    },
  };
}
