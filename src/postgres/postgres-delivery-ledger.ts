import type pg from 'pg';
import {
  DEFAULT_SCHEDULED_RETENTION_MS,
  type AdmitVerdict,
  type DeliveryLedger,
  type DeliveryLedgerOptions,
  type LedgerCopy,
  type LedgerSettlement,
  type LostCopy,
  type OutageLoss,
  type ReplaceOutcome,
} from '../broker/delivery-ledger.js';
import {
  checkCopy,
  checkLostCopy,
  checkMessageId,
  checkMs,
  checkQueue,
  checkToken,
} from '../broker/ledger-arguments.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import { requireSchema } from './migrate-postgres.js';
import type { PostgresConnectionOptions } from './postgres-connection.js';
import { openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';

/** Options of {@link PostgresDeliveryLedger}. */
export interface PostgresDeliveryLedgerOptions extends DeliveryLedgerOptions {
  /**
   * Where PostgreSQL is: a URL or pool options (the ledger opens a pool and ends it on close), or
   * the application's `pg.Pool` (shared, never ended by the ledger).
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema of Harrier's tables (migrated with `harrier postgres migrate`).
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * How often, in the clock's ms, a call starts a prune of expired rows (at most
   * {@link LEDGER_PRUNE_BATCH} of each table; {@link PostgresDeliveryLedger.prune} removes more); 0 never.
   * @defaultValue 60000
   */
  readonly pruneEveryMs?: number;
}

/** Most expired rows of each table one prune deletes. */
export const LEDGER_PRUNE_BATCH = 1000;

/**
 * A {@link DeliveryLedger} in PostgreSQL, in the `ledger_claims`, `ledger_copies` and
 * `ledger_losses` tables of Harrier's schema (migrations 9 and 10), shared by every process of a broker.
 *
 * @remarks
 * Every call is one statement: `admit` calls the `ledger_admit` function, which locks the
 * scheduled copy before it claims the id, so an admit and a cancel of one copy never both win.
 * Expired rows are pruned by one call a minute (`pruneEveryMs`), in the background of that call.
 * The ledger checks the schema version on first use (`schema-outdated` naming the migrate command)
 * and never migrates. Failures reject with `postgres-unavailable`, `schema-outdated`, or
 * `store-closed` after {@link PostgresDeliveryLedger.close}.
 *
 * @example
 * ```ts
 * const ledger = new PostgresDeliveryLedger({ connection: pool });
 * ```
 */
export class PostgresDeliveryLedger implements DeliveryLedger {
  readonly #connection: PostgresConnectionOptions;
  readonly #handle: PoolHandle;
  readonly #tables: PostgresTables;
  readonly #clock: Clock;
  readonly #retentionMs: number;
  readonly #pruneEveryMs: number;
  #nextPruneAt: number;
  #pruning: Promise<unknown> | undefined;
  #ready: Promise<void> | undefined;
  #closed = false;

  /**
   * @throws HarrierError `invalid-option` for a bad schema name, `invalid-argument` for a
   *   `scheduledRetentionMs` or `pruneEveryMs` that is not whole ms >= 0.
   */
  constructor(options: PostgresDeliveryLedgerOptions) {
    this.#tables = postgresTables(options.schema);
    this.#clock = options.clock ?? systemClock;
    this.#retentionMs = options.scheduledRetentionMs ?? DEFAULT_SCHEDULED_RETENTION_MS;
    this.#pruneEveryMs = options.pruneEveryMs ?? 60_000;
    checkMs('scheduledRetentionMs', this.#retentionMs);
    checkMs('pruneEveryMs', this.#pruneEveryMs);
    this.#nextPruneAt = this.#clock.now() + this.#pruneEveryMs;
    this.#connection = options.connection;
    this.#handle = openPool(options.connection);
  }

  async admit(copy: LedgerCopy, windowMs: number): Promise<AdmitVerdict> {
    checkCopy(copy);
    checkMs('windowMs', windowMs);
    const now = this.#now();
    const rows = await this.#query<{ verdict: string }>(
      'admitting a delivery',
      `SELECT ${this.#tables.ledgerAdmit}($1, $2, $3, $4, $5) AS verdict`,
      [copy.queue, copy.messageId, copy.token, now, now + windowMs],
    );
    const verdict = rows[0]?.verdict;
    return verdict === 'cancelled' || verdict === 'duplicate' ? verdict : 'deliver';
  }

  async settle(copy: LedgerCopy, settlement: LedgerSettlement, windowMs: number): Promise<boolean> {
    checkCopy(copy);
    checkMs('windowMs', windowMs);
    const now = this.#now();
    const rows = await this.#query(
      'settling a delivery',
      `WITH settled AS (
         UPDATE ${this.#tables.ledgerClaims} SET state = $4, expires_at = $6
          WHERE message_id = $1 AND queue = $2 AND token = $3 AND state <> 'done' AND expires_at > $5
          RETURNING message_id, queue),
       forgotten AS (
         DELETE FROM ${this.#tables.ledgerLosses} x USING settled s
          WHERE x.message_id = s.message_id AND x.queue = s.queue)
       SELECT 1 FROM settled`,
      [copy.messageId, copy.queue, copy.token, settlement, now, now + windowMs],
    );
    return rows.length === 1;
  }

  async lost(copies: readonly LostCopy[], windowMs: number): Promise<number> {
    copies.forEach(checkLostCopy);
    checkMs('windowMs', windowMs);
    const now = this.#now();
    // One row per queue's copy (the last of a batch wins); none where the queue delivers another
    // token, settled this one done, or admitted it after the drop. Over a loss of the same token not taken yet, the ends it
    // excused carry on (mergedExcusedEnds).
    const latest = new Map(copies.map((copy) => [JSON.stringify([copy.messageId, copy.queue]), copy]));
    const batch = [...latest.values()];
    const rows = await this.#query(
      'recording outage losses',
      `INSERT INTO ${this.#tables.ledgerLosses} AS x
              (message_id, queue, token, delivery_count, excused_ends, lost_at, expires_at)
       SELECT l.message_id, l.queue, l.token, l.delivery_count, l.excused_ends, LEAST($6, l.dropped_at), $7
         FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $8::bigint[])
              AS l(message_id, queue, token, delivery_count, excused_ends, dropped_at)
        WHERE NOT EXISTS (
          SELECT 1 FROM ${this.#tables.ledgerClaims} c
           WHERE c.message_id = l.message_id AND c.queue = l.queue AND c.expires_at > $6
             AND (c.token <> l.token OR c.state = 'done' OR c.admitted_at > LEAST($6, l.dropped_at)))
       ON CONFLICT (message_id, queue) DO UPDATE SET
         token = EXCLUDED.token, delivery_count = EXCLUDED.delivery_count,
         excused_ends = CASE WHEN x.token = EXCLUDED.token AND x.expires_at > $6
           THEN LEAST(2147483647, GREATEST(EXCLUDED.excused_ends::bigint,
             x.excused_ends::bigint + EXCLUDED.delivery_count - x.delivery_count))::int
           ELSE EXCLUDED.excused_ends END,
         lost_at = EXCLUDED.lost_at, expires_at = EXCLUDED.expires_at
       RETURNING 1`,
      [
        batch.map((copy) => copy.messageId),
        batch.map((copy) => copy.queue),
        batch.map((copy) => copy.token),
        batch.map((copy) => copy.deliveryCount),
        batch.map((copy) => copy.excusedEnds),
        now,
        now + windowMs,
        batch.map((copy) => copy.droppedAt ?? now),
      ],
    );
    return rows.length;
  }

  async takeLoss(copy: LedgerCopy): Promise<OutageLoss | undefined> {
    checkCopy(copy);
    const now = this.#now();
    const rows = await this.#query<{ delivery_count: number; excused_ends: number; lost_at: string }>(
      'taking an outage loss',
      `DELETE FROM ${this.#tables.ledgerLosses}
        WHERE message_id = $1 AND queue = $2 AND token = $3 AND expires_at > $4
        RETURNING delivery_count, excused_ends, lost_at`,
      [copy.messageId, copy.queue, copy.token, now],
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    return {
      deliveryCount: row.delivery_count,
      excusedEnds: row.excused_ends,
      msAgo: Math.max(0, now - Number(row.lost_at)),
    };
  }

  async replace(copy: LedgerCopy, windowMs: number): Promise<ReplaceOutcome> {
    checkCopy(copy);
    checkMs('windowMs', windowMs);
    const now = this.#now();
    // Always an upsert, so the row returned is the latest one also when another process wrote it.
    const rows = await this.#query<{ token: string; state: string }>(
      'replacing a delivery',
      `INSERT INTO ${this.#tables.ledgerClaims} AS c (message_id, queue, token, state, expires_at)
         VALUES ($1, $2, $3, 'waiting', $5)
       ON CONFLICT (message_id, queue) DO UPDATE SET
         token = CASE WHEN c.expires_at <= $4 OR c.state = 'done' THEN EXCLUDED.token ELSE c.token END,
         state = CASE WHEN c.expires_at <= $4 OR c.state = 'done' THEN 'waiting' ELSE c.state END,
         expires_at = CASE WHEN c.expires_at <= $4 OR c.state = 'done' THEN EXCLUDED.expires_at ELSE c.expires_at END,
         admitted_at = CASE WHEN c.expires_at <= $4 OR c.state = 'done' THEN NULL ELSE c.admitted_at END
       RETURNING token, state`,
      [copy.messageId, copy.queue, copy.token, now, now + windowMs],
    );
    const row = rows[0];
    if (row === undefined || row.token === copy.token) return 'replaced';
    return row.state === 'active' ? 'in-flight' : 'held';
  }

  async scheduled(
    messageId: string,
    token: string,
    queues: readonly string[],
    deliverAt: number,
  ): Promise<void> {
    checkMessageId(messageId);
    checkToken(token);
    queues.forEach(checkQueue);
    checkMs('deliverAt', deliverAt);
    const now = this.#now();
    await this.#query(
      'recording scheduled copies',
      `INSERT INTO ${this.#tables.ledgerCopies} AS s (message_id, queue, token, state, deliver_at, expires_at)
         SELECT $1, q, $2, 'pending', $3, $4 FROM unnest($5::text[]) AS q
       ON CONFLICT (message_id, queue, token) DO UPDATE
         SET state = 'pending', deliver_at = EXCLUDED.deliver_at, expires_at = EXCLUDED.expires_at
         WHERE s.expires_at <= $6`,
      [messageId, token, deliverAt, Math.max(now, deliverAt) + this.#retentionMs, [...new Set(queues)], now],
    );
  }

  async cancel(messageId: string): Promise<number> {
    checkMessageId(messageId);
    const now = this.#now();
    const rows = await this.#query<{ count: number }>(
      'cancelling scheduled copies',
      `WITH cancelled AS (
         UPDATE ${this.#tables.ledgerCopies} SET state = 'cancelled'
          WHERE message_id = $1 AND state = 'pending' AND deliver_at > $2 AND expires_at > $2
          RETURNING queue, token)
       SELECT count(DISTINCT x.queue)::int AS count FROM cancelled x
        WHERE NOT EXISTS (
          SELECT 1 FROM ${this.#tables.ledgerClaims} c
           WHERE c.message_id = $1 AND c.queue = x.queue AND c.expires_at > $2 AND c.token <> x.token)`,
      [messageId, now],
    );
    return rows[0]?.count ?? 0;
  }

  /**
   * Deletes expired rows, at most {@link LEDGER_PRUNE_BATCH} of each table; resolves to how many it
   * deleted. Calls start one a minute on their own (`pruneEveryMs`); call it to prune more.
   */
  async prune(): Promise<number> {
    const now = this.#clock.now();
    const batch = (table: string): string =>
      `DELETE FROM ${table} WHERE expires_at <= $1
          AND ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE expires_at <= $1 LIMIT $2)) RETURNING 1`;
    const rows = await this.#query<{ removed: number }>(
      'pruning expired ledger rows',
      `WITH claims AS (${batch(this.#tables.ledgerClaims)}), copies AS (${batch(this.#tables.ledgerCopies)}),
            losses AS (${batch(this.#tables.ledgerLosses)})
       SELECT ((SELECT count(*) FROM claims) + (SELECT count(*) FROM copies)
               + (SELECT count(*) FROM losses))::int AS removed`,
      [now, LEDGER_PRUNE_BATCH],
    );
    return rows[0]?.removed ?? 0;
  }

  /** Waits for a prune under way, then ends the pool when the ledger opened it (a pool given stays open). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pruning;
    await this.#handle.end();
  }

  /** The clock's time, starting a prune in the background when one is due. */
  #now(): number {
    const now = this.#clock.now();
    if (this.#pruneEveryMs > 0 && now >= this.#nextPruneAt && this.#pruning === undefined && !this.#closed) {
      this.#nextPruneAt = now + this.#pruneEveryMs;
      // A failed prune is tried again by a later call; the rows it left count as absent meanwhile.
      this.#pruning = this.prune()
        .catch(() => undefined)
        .finally(() => {
          this.#pruning = undefined;
        });
    }
    return now;
  }

  async #query<R extends pg.QueryResultRow>(doing: string, sql: string, values: unknown[]): Promise<R[]> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        `PostgresDeliveryLedger was closed while ${doing}: make a new ledger`,
      );
    }
    try {
      this.#ready ??= requireSchema(this.#handle.pool, this.#tables, 'PostgresDeliveryLedger').catch(
        (error: unknown) => {
          // Checked again on the next call: the schema may be migrated meanwhile.
          this.#ready = undefined;
          throw error;
        },
      );
      await this.#ready;
      return (await this.#handle.pool.query<R>(sql, values)).rows;
    } catch (error) {
      throw postgresError(error, this.#connection, doing);
    }
  }
}
