import type pg from 'pg';
import type { OutgoingMessage } from '../../broker/message-broker.js';
import { noRouteError } from '../../broker/no-route-error.js';
import { commandQueue, subscriptionQueue } from '../../broker/queue-names.js';
import type { PostgresTables } from '../postgres-schema.js';
import { brokerChannel } from './broker-channel.js';
import { orderedCommandLane } from './receiver-lanes.js';

/** A row of `routes` as a publish reads it. */
interface RouteRow {
  readonly endpoint: string;
  readonly kind: 'command' | 'event';
  readonly handler: string;
  readonly type: string;
  readonly ordered: boolean;
  readonly registered_at: string;
}

/**
 * The command routes a broker's publishes read, per type, trusted for `maxAgeMs` after they were
 * read: a publish of commands whose types are all known reads nothing, one round trip less.
 *
 * @remarks
 * A route removed by another process (its endpoint registered again without the type) is still
 * followed for at most `maxAgeMs`, as the Redis broker's are; the broker forgets every route when it
 * registers an endpoint itself. A type without a command route is never kept (its endpoint may
 * register at any time), nor are event subscriptions: an event published right after a
 * subscription is registered elsewhere reaches it. Times are `performance.now()`, not the broker's
 * clock (a test's manual clock would keep a route for ever).
 */
export class CommandRouteRows {
  readonly #maxAgeMs: number;
  readonly #byType = new Map<string, { readonly rows: readonly RouteRow[]; readonly readAt: number }>();
  #forgotAt = -Infinity;

  constructor(maxAgeMs: number) {
    this.#maxAgeMs = maxAgeMs;
  }

  /** The command routes of `types` if every one is known and fresh; otherwise undefined. */
  rowsOf(types: readonly string[]): RouteRow[] | undefined {
    const now = performance.now();
    const rows: RouteRow[] = [];
    for (const type of types) {
      const known = this.#byType.get(type);
      if (known === undefined || now - known.readAt >= this.#maxAgeMs) return undefined;
      rows.push(...known.rows);
    }
    return rows;
  }

  /** Files the routes read for `types` (every row of theirs): the command routes of each. */
  learn(types: readonly string[], rows: readonly RouteRow[], readAt: number): void {
    // Read before the routes last changed here: perhaps what they were before.
    if (readAt <= this.#forgotAt) return;
    for (const type of types) {
      const commands = rows.filter((row) => row.type === type && row.kind === 'command');
      if (commands.length > 0) this.#byType.set(type, { rows: commands, readAt });
      else this.#byType.delete(type);
    }
  }

  /** Forgets every route, and any read under way now. */
  forget(): void {
    this.#forgotAt = performance.now();
    this.#byType.clear();
  }
}

/** One copy of a message for one queue, as it is inserted. */
interface Target {
  readonly queue: string;
  readonly lane: string;
  readonly endpoint: string | null;
  readonly handler: string | null;
  readonly message: OutgoingMessage;
  readonly orderKey: string | null;
}

/**
 * Routes `messages` and inserts their copies into the broker's queue in the caller's transaction, in
 * one statement that also records each (queue, message id) for the dedupe window and notifies the
 * lanes written to; returns how many rows it inserted.
 *
 * @remarks
 * Reads the routes in the same transaction: a command whose type no endpoint registered throws
 * `no-route` (unless its `requireRoute` is false) before anything is written; an event gets one copy
 * per registered subscription of its type. A (queue, message id) recorded less than
 * `dedupeWindowMs` ago inserts nothing: an idempotent publish; so does one whose copy is still in
 * the queue (waiting, delayed or held), however long ago it was published, unless the window is 0.
 * PostgreSQL delivers the NOTIFY (if the statement sends it) only if the transaction commits. An ordered copy first takes a transaction-scoped advisory lock on its
 * (lane, order key): a second publisher of that key waits for this transaction to end (see
 * {@link orderLocks}). Exported for a unit of work that publishes inside the handler's own
 * transaction.
 *
 * @param client - a client inside a transaction (BEGIN issued by the caller) or in autocommit: the
 *   statements then run one after the other, the insert being a single statement either way.
 * @param now - ms since the epoch: `created_at`, the due time of a message without `deliverAt`,
 *   and the start of its dedupe window.
 * @param written - when given, the statement sends no NOTIFY: it is called with the lanes written
 *   to, for the caller to wake their receivers once its transaction has committed (a NOTIFY holds a
 *   database-wide lock from the statement until its transaction's commit is flushed, so publishes
 *   notifying in their own transactions commit one at a time). Without it (a unit of work's
 *   hand-off) the statement notifies them, delivered when the caller's transaction commits.
 * @param routes - the command routes to trust instead of reading them (see {@link CommandRouteRows}).
 * @throws HarrierError `no-route` as `MessageBroker.publishBatch` does.
 */
export async function insertMessages(
  client: pg.ClientBase | pg.Pool,
  tables: PostgresTables,
  messages: readonly OutgoingMessage[],
  now: number,
  dedupeWindowMs: number,
  written?: (lanes: readonly string[]) => void,
  routes?: CommandRouteRows,
): Promise<number> {
  if (messages.length === 0) return 0;
  const types = [...new Set(messages.map((m) => m.type))];
  let found = messages.every((m) => m.kind === 'command') ? routes?.rowsOf(types) : undefined;
  if (found === undefined) {
    const readAt = performance.now();
    const read = await client.query<RouteRow>(
      `SELECT endpoint, kind, handler, type, ordered, registered_at FROM ${tables.routes} WHERE type = ANY($1::text[])`,
      [types],
    );
    found = read.rows;
    routes?.learn(types, found, readAt);
  }
  const events = new Map<string, RouteRow[]>();
  const commands = new Map<string, RouteRow>();
  for (const row of found) {
    if (row.kind === 'event') {
      const list = events.get(row.type);
      if (list === undefined) events.set(row.type, [row]);
      else list.push(row);
      continue;
    }
    // A command type has one handler in a system; others are registrations left by an endpoint it
    // moved from: the latest registration wins, then the first endpoint name, as on Redis.
    const known = commands.get(row.type);
    const at = Number(row.registered_at);
    if (
      known === undefined ||
      Number(known.registered_at) < at ||
      (Number(known.registered_at) === at && row.endpoint < known.endpoint)
    )
      commands.set(row.type, row);
  }
  const targets: Target[] = [];
  const seen = new Set<string>();
  const add = (target: Target): void => {
    // A batch repeating an id inserts its first copy only, as a second publish would.
    const key = `${target.queue}\u0000${target.message.id}`;
    if (seen.has(key)) return;
    seen.add(key);
    targets.push(target);
  };
  for (const message of messages) {
    const key = message.ordered === true ? (message.partitionKey ?? '') : null;
    if (message.kind === 'event') {
      for (const route of events.get(message.type) ?? []) {
        const queue = subscriptionQueue(route.endpoint, route.handler);
        add({ queue, lane: queue, endpoint: route.endpoint, handler: route.handler, message, orderKey: key });
      }
      continue;
    }
    const route = commands.get(message.type);
    if (route === undefined && message.requireRoute !== false) throw noRouteError(message.type);
    const queue = commandQueue(message.type);
    const ordered = key !== null && route?.ordered === true;
    add({
      queue,
      lane: ordered ? orderedCommandLane(route.endpoint) : queue,
      endpoint: route?.endpoint ?? null,
      handler: null,
      message,
      orderKey: ordered ? key : null,
    });
  }
  if (targets.length === 0) return 0;
  const inserted = await client.query<{ rows: string; lanes: string[] | null }>(
    `WITH locks AS (
       SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest($15::text[]) WITH ORDINALITY AS u(k, i)),
     t AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                            $8::bytea[], $9::text[], $10::text[], $11::bigint[])
         WITH ORDINALITY AS t(queue, lane, endpoint, handler, message_id, kind, type, body, partition_key, order_key, run_at, i)
        WHERE (SELECT count(*) FROM locks) >= 0),
     fresh AS (
       SELECT * FROM t
        WHERE $13::bigint = 0
           OR NOT EXISTS (SELECT 1 FROM ${tables.queue} q WHERE q.queue = t.queue AND q.message_id = t.message_id)),
     d AS (
       INSERT INTO ${tables.dedupe} AS d (queue, message_id, expires_at)
       SELECT queue, message_id, $12::bigint + $13::bigint FROM fresh
        -- In key order: two batches with common ids lock their rows in one order, never deadlock.
        ORDER BY queue, message_id
       ON CONFLICT (queue, message_id) DO UPDATE SET expires_at = EXCLUDED.expires_at
         WHERE d.expires_at <= $12::bigint
       RETURNING queue, message_id),
     ins AS (
       INSERT INTO ${tables.queue} (queue, lane, endpoint, handler, message_id, kind, type, body, partition_key,
                                    order_key, run_at, created_at)
       SELECT t.queue, t.lane, t.endpoint, t.handler, t.message_id, t.kind, t.type, t.body, t.partition_key,
              t.order_key, t.run_at, $12::bigint
         FROM fresh t JOIN d ON d.queue = t.queue AND d.message_id = t.message_id
        ORDER BY t.i
       RETURNING lane),
     lanes AS (SELECT DISTINCT lane FROM ins)
     SELECT (SELECT count(*) FROM ins)::text AS rows,
            (SELECT count(pg_notify($14, lane)::text) FROM lanes WHERE $14::text IS NOT NULL) AS notified,
            (SELECT array_agg(lane) FROM lanes) AS lanes`,
    [
      targets.map((t) => t.queue),
      targets.map((t) => t.lane),
      targets.map((t) => t.endpoint),
      targets.map((t) => t.handler),
      targets.map((t) => t.message.id),
      targets.map((t) => t.message.kind),
      targets.map((t) => t.message.type),
      targets.map((t) => Buffer.from(t.message.body, 'utf8')),
      targets.map((t) => t.message.partitionKey ?? null),
      targets.map((t) => t.orderKey),
      targets.map((t) => t.message.deliverAt ?? now),
      now,
      dedupeWindowMs,
      written === undefined ? brokerChannel(tables) : null,
      orderLocks(targets),
    ],
  );
  written?.(inserted.rows[0]?.lanes ?? []);
  return Number(inserted.rows[0]?.rows ?? 0);
}

/**
 * The advisory locks of the ordered (lane, order key) pairs of `targets`, as sorted `lane/key`
 * strings (sorted: two batches take the locks of their common keys in one order, never deadlock).
 *
 * @remarks
 * A row's `seq` is drawn when it is inserted, but other sessions see it only once its transaction
 * commits: without a lock, a transaction holding an ordered row of a key uncommitted lets a later
 * publish of that key (a higher seq, committed first) be taken before it, and then the earlier row
 * too, out of order. Under the lock, which the insert takes before it reads a row of `t` (the
 * uncorrelated subquery in its WHERE runs before its first row is returned) and holds until its
 * transaction ends, publishers of one key insert one after another: seq order is commit order,
 * whether the caller's client is in a transaction, in autocommit, or a pool.
 */
function orderLocks(targets: readonly Target[]): string[] {
  const keys = new Set<string>();
  for (const target of targets) if (target.orderKey !== null) keys.add(`${target.lane}/${target.orderKey}`);
  return [...keys].sort();
}
