import type pg from 'pg';
import { systemClock, type Clock } from '../clock/clock.js';
import { sleep } from '../clock/sleep.js';
import { HarrierError } from '../errors/harrier-error.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import type { OutgoingMessage } from '../messages/outgoing-message.js';
import { fnv1a64 } from '../messages/partition.js';
import { holdClient, type HeldClient } from './held-client.js';
import { isOutboxOutage, malformedOutboxRow } from './outbox-failure.js';
import { requireSchema } from './migrate-postgres.js';
import { OUTBOX_LANES, outboxChannel, outgoingOfRow, type OutboxRow } from './outbox-rows.js';
import { describePostgres, isPool, type PostgresConnectionOptions } from './postgres-connection.js';
import { isPostgresUnavailable, openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';

/**
 * Where the relay publishes outbox rows: `bus.publisher`, or a `MessagePublisher` (harrier/extend)
 * built from the broker and the event log. It must append events to the log and fan out through
 * the broker idempotently by message id, as the bus's own publish does.
 */
export interface OutboxPublisher {
  /** `options.origin` is `'outbox'`: telemetry names the relay's publishes by it. */
  publish(
    messages: readonly OutgoingMessage[],
    options?: { readonly origin?: 'handler' | 'outbox' },
  ): Promise<void>;
}

const RELAY_ORIGIN = { origin: 'outbox' } as const;

/** Options of {@link startOutboxRelay}. */
export interface OutboxRelayOptions {
  /** The application's PostgreSQL (a URL, a pg.Pool to share, or pool options). */
  readonly connection: PostgresConnectionOptions;
  /** Where rows are published: `bus.publisher`, or `new MessagePublisher({ broker, eventLog })`. */
  readonly publisher: OutboxPublisher;
  /**
   * The schema of Harrier's tables.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * Rows locked, published and removed in one transaction.
   * @defaultValue 100
   */
  readonly batchSize?: number;
  /**
   * How often the relay looks for rows without a NOTIFY (the fallback when a notification is
   * missed, e.g. across a reconnect).
   * @defaultValue 1000
   */
  readonly pollIntervalMs?: number;
  /**
   * How often the relay counts the running relays and takes or gives back lanes, so every relay
   * owns about `32 / relays` lanes.
   * @defaultValue 1000
   */
  readonly rebalanceIntervalMs?: number;
  /**
   * Wake on NOTIFY when rows commit. `false` leaves only polling (when NOTIFY is not wanted). Either
   * way the relay needs a direct or session-mode connection: lane ownership is a session advisory
   * lock, which a transaction-mode pooler (PgBouncer `pool_mode = transaction`) does not keep.
   * @defaultValue true
   */
  readonly listen?: boolean;
  /**
   * Tries of a row before the relay parks it: moves it to the `outbox_parked` table (in the
   * transaction that removes it from the outbox), so the rows behind it in its lane go on. Only
   * failures of the row count (a command with no route, a message the broker refuses); an outage
   * (the broker or a store unreachable, the publisher stopping) never does. A malformed row is
   * parked at its first failure. Tries are counted in the row, so they survive a restart.
   *
   * @remarks
   * With {@link OutboxRelayOptions.retryDelayMs} at 1 s, ten tries span about two and a half
   * minutes: long enough to ride out a consumer deploying its route, short enough that one bad row
   * does not hold the messages behind it for long. Parked rows are replayed with `harrier postgres
   * outbox replay` or {@link PostgresOutboxAdmin}.
   * @defaultValue 10
   */
  readonly maxAttempts?: number;
  /**
   * The pause after a row's first failed try; it doubles after each one, up to 30 s (or this
   * value, when larger).
   * @defaultValue 1000
   */
  readonly retryDelayMs?: number;
  /**
   * The clock of polling, rebalancing and retry pauses.
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
  /**
   * Where failures to reach PostgreSQL or to publish are reported (the relay retries them).
   * @defaultValue consoleLogger
   */
  readonly logger?: Logger;
}

/** What a relay has done so far. */
export interface OutboxRelayStats {
  /** Rows published and removed by this relay. */
  readonly published: number;
  /** Transactions that published at least one row. */
  readonly batches: number;
  /** The lanes this relay owns now. */
  readonly lanes: readonly number[];
  /** Rows this relay moved to the parked rows. */
  readonly parked: number;
}

const RETRY_BASE_MS = 100;
const RETRY_CAP_MS = 5_000;
const ROW_RETRY_CAP_MS = 30_000;

/** A row's failed publish, as {@link OutboxRelay} records it once its lanes are done. */
interface RowFailure {
  readonly row: OutboxRow;
  readonly error: unknown;
  /** Why the row can never be published, when it is malformed. */
  readonly malformed: string | undefined;
  /**
   * When the try failed: recorded as the row's failure time, and the start of its pause, so the
   * recorded times and the tries' spacing agree.
   */
  readonly at: number;
}

/**
 * The connection the relay opens: a URL or pool options get TCP keepalive (`keepAlive: true` unless
 * set), so a relay whose host dies loses its session, and its lanes, when the server's keepalive
 * probes fail rather than after hours. A shared pool is used as it is.
 */
export function relayConnection(connection: PostgresConnectionOptions): PostgresConnectionOptions {
  if (isPool(connection)) return connection;
  if (typeof connection === 'string') return { connectionString: connection, keepAlive: true };
  return { keepAlive: true, ...connection };
}

function positive(name: string, value: number | undefined, fallback: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 1 || v > max) {
    throw new HarrierError(
      'invalid-option',
      `Outbox relay option ${name} is ${String(value)}: use a whole number from 1 to ${max} (default ${fallback})`,
    );
  }
  return v;
}

/**
 * The advisory lock keys (first of the two-int form) of a schema's relays: `lanes` (second key: the
 * lane) and `relays` (second key 0, held shared by every running relay). 31-bit, so `pg_locks.classid`
 * shows them as they are.
 */
export function relayLockKeys(tables: PostgresTables): { readonly lanes: number; readonly relays: number } {
  const key = (purpose: string): number =>
    Number(fnv1a64(`harrier-outbox-${purpose}:${tables.schema}`) & 0x7fffffffn);
  return { lanes: key('lanes'), relays: key('relays') };
}

/**
 * Publishes outbox rows through the broker: the relay of the transactional outbox.
 *
 * @remarks
 * - **Ownership and order.** Rows are spread over {@link OUTBOX_LANES} lanes by partition key. A
 *   relay publishes only lanes it holds a session advisory lock on (`pg_try_advisory_lock`), so one
 *   relay at a time publishes a lane, in `seq` order: messages of one key keep their order. Relays
 *   hold a shared lock of their own, count each other through `pg_locks`, and every
 *   `rebalanceIntervalMs` give back lanes above their share (between batches) or take free ones.
 *   A relay that dies loses its session and so its locks: the others take its lanes. The relay
 *   therefore needs a direct or session-mode connection (not PgBouncer in transaction mode).
 * - **Dead hosts.** A relay it creates a pool for has TCP keepalive on its connections; PostgreSQL
 *   still notices a dead host only by its own `tcp_keepalives_*` settings, so set those (e.g. idle
 *   60 s, interval 10 s, count 6) when relays share a pool or run on hosts that may vanish.
 * - **Batches.** `SELECT … FOR UPDATE SKIP LOCKED` (oldest first), publish, `DELETE`, `COMMIT`, in
 *   one transaction. A relay killed after the publish and before the commit leaves the rows, and
 *   the next owner publishes them again: at-least-once, absorbed by the idempotent publish (log
 *   append and broker dedupe by message id) and by an inbox.
 * - **Waking.** LISTEN on {@link outboxChannel}; a commit that wrote rows notifies. Polling every
 *   `pollIntervalMs` covers a missed notification.
 * - **Failures.** A batch whose publish fails is published again lane by lane. A lane whose
 *   publish fails keeps its rows and is held back on its own while the other lanes go on; its
 *   order is kept. On an outage (the broker unreachable, the publisher closing) the lane waits,
 *   100 ms doubling to 5 s, and no try counts. On any other failure (e.g. `no-route`) the lane is
 *   published row by row up to the failing row, which gets a try counted in its row; after
 *   `maxAttempts` tries (or at once when malformed) the row is parked (moved to `outbox_parked` in
 *   the transaction that deletes it) and its lane goes on. A lost connection (PostgreSQL
 *   restarted) is reopened, and the lanes taken again.
 */
export class OutboxRelay {
  readonly #publisher: OutboxPublisher;
  readonly #tables: PostgresTables;
  readonly #handle: PoolHandle;
  readonly #connection: PostgresConnectionOptions;
  readonly #batchSize: number;
  readonly #maxAttempts: number;
  readonly #retryDelayMs: number;
  readonly #pollMs: number;
  readonly #rebalanceMs: number;
  readonly #listen: boolean;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #laneKey: number;
  readonly #memberKey: number;
  #session: HeldClient | undefined;
  #broken = false;
  #owned = new Set<number>();
  #notified = false;
  #waiter: AbortController | undefined;
  #stopping = false;
  #loop: Promise<void> = Promise.resolve();
  #nextRebalance = 0;
  #published = 0;
  #batches = 0;
  #parked = 0;
  /** Lanes whose last publish failed: not read again before `retryAt`. */
  readonly #heldBack = new Map<number, { failures: number; retryAt: number }>();

  private constructor(options: OutboxRelayOptions, handle: PoolHandle) {
    this.#publisher = options.publisher;
    this.#connection = options.connection;
    this.#tables = postgresTables(options.schema);
    this.#handle = handle;
    this.#batchSize = positive('batchSize', options.batchSize, 100, 10_000);
    this.#maxAttempts = positive('maxAttempts', options.maxAttempts, 10, 1_000_000);
    this.#retryDelayMs = positive('retryDelayMs', options.retryDelayMs, 1000, 3_600_000);
    this.#pollMs = positive('pollIntervalMs', options.pollIntervalMs, 1000, 3_600_000);
    this.#rebalanceMs = positive('rebalanceIntervalMs', options.rebalanceIntervalMs, 1000, 3_600_000);
    this.#listen = options.listen ?? true;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? consoleLogger;
    const keys = relayLockKeys(this.#tables);
    this.#laneKey = keys.lanes;
    this.#memberKey = keys.relays;
  }

  /** @internal Use {@link startOutboxRelay}. */
  static async start(options: OutboxRelayOptions): Promise<OutboxRelay> {
    if (typeof (options as Partial<OutboxRelayOptions> | undefined)?.publisher?.publish !== 'function') {
      throw new HarrierError(
        'invalid-option',
        'startOutboxRelay needs a publisher: pass { publisher: bus.publisher } (or a MessagePublisher from harrier/extend)',
      );
    }
    if ((options as Partial<OutboxRelayOptions>).connection === undefined) {
      throw new HarrierError(
        'invalid-option',
        'startOutboxRelay needs a connection: pass { connection: process.env.DATABASE_URL } or your pg.Pool',
      );
    }
    postgresTables(options.schema);
    const handle = openPool(relayConnection(options.connection), options.logger ?? consoleLogger);
    let relay: OutboxRelay;
    try {
      relay = new OutboxRelay(options, handle);
      await requireSchema(handle.pool, relay.#tables, 'The outbox relay');
      await relay.#connect();
    } catch (error) {
      await handle.end();
      throw postgresError(error, options.connection, 'starting the outbox relay');
    }
    relay.#loop = relay.#run();
    return relay;
  }

  /** What this relay has published, and the lanes it owns. */
  stats(): OutboxRelayStats {
    return {
      published: this.#published,
      batches: this.#batches,
      lanes: [...this.#owned].sort((a, b) => a - b),
      parked: this.#parked,
    };
  }

  /**
   * Stops: finishes the batch in progress (published and removed, or rolled back), releases its
   * lanes and closes its connections. Rows left are published by the other relays or the next start.
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#waiter?.abort();
    await this.#loop;
    this.#drop();
    await this.#handle.end();
  }

  async #run(): Promise<void> {
    let failures = 0;
    while (!this.#stopping) {
      try {
        const session = this.#session?.client ?? (await this.#connect());
        this.#notified = false;
        // Rebalancing between batches too, so a relay with a backlog still gives lanes to a newcomer.
        for (;;) {
          if (this.#clock.now() >= this.#nextRebalance) {
            await this.#rebalance(session);
            this.#nextRebalance = this.#clock.now() + this.#rebalanceMs;
          }
          if (this.#isStopping() || (await this.#batch(session)) < this.#batchSize) break;
        }
        failures = 0;
        const now = this.#clock.now();
        let wake = Math.min(now + this.#pollMs, this.#nextRebalance);
        for (const held of this.#heldBack.values())
          if (held.retryAt > now) wake = Math.min(wake, held.retryAt);
        await this.#waitForWork(wake - now);
      } catch (error) {
        failures += 1;
        const lost = this.#broken || isPostgresUnavailable(error);
        if (lost) this.#drop();
        this.#logger.warn(
          lost
            ? `Outbox relay lost PostgreSQL at ${describePostgres(this.#connection)}; reconnecting`
            : 'Outbox relay failed on PostgreSQL; the batch stays in the outbox and is retried',
          { error: error instanceof Error ? error.message : String(error), failures },
        );
        if (!this.#isStopping()) {
          const pause = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(failures - 1, 16));
          await this.#waitForWork(pause, true);
        }
      }
    }
  }

  /** Read through a call: stop() flips it while the loop awaits. */
  #isStopping(): boolean {
    return this.#stopping;
  }

  /** Opens the session that holds the locks and LISTENs. */
  async #connect(): Promise<pg.PoolClient> {
    this.#broken = false;
    const held = await holdClient(this.#handle.pool, () => {
      this.#broken = true;
      this.#waiter?.abort();
    });
    const { client } = held;
    client.on('notification', () => {
      this.#notified = true;
      this.#waiter?.abort();
    });
    try {
      if (this.#listen) await client.query(`LISTEN "${outboxChannel(this.#tables)}"`);
      await client.query('SELECT pg_advisory_lock_shared($1, 0)', [this.#memberKey]);
    } catch (error) {
      held.release(true);
      throw error;
    }
    this.#session = held;
    this.#owned = new Set();
    this.#nextRebalance = 0;
    return client;
  }

  /** Closes the session: PostgreSQL releases its locks with it. */
  #drop(): void {
    const session = this.#session;
    this.#session = undefined;
    this.#owned = new Set();
    this.#heldBack.clear();
    session?.release(true);
  }

  /** Resolves after `ms`, or at once on a NOTIFY (unless `ignoreNotify`) or stop. */
  async #waitForWork(ms: number, ignoreNotify = false): Promise<void> {
    if (this.#stopping || (!ignoreNotify && this.#notified) || ms <= 0) return;
    const waiter = new AbortController();
    this.#waiter = waiter;
    await sleep(this.#clock, ms, waiter.signal);
    this.#waiter = undefined;
  }

  /** Takes free lanes up to this relay's share, or gives back those above it. */
  async #rebalance(session: pg.PoolClient): Promise<void> {
    const held = await session.query<{ relays: number; lane: number | null; mine: boolean }>(
      `WITH locks AS (
         SELECT classid::bigint AS key, objid::int AS obj, pid FROM pg_locks
          WHERE locktype = 'advisory' AND objsubid = 2 AND granted
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
       SELECT (SELECT count(DISTINCT pid)::int FROM locks WHERE key = $1 AND obj = 0) AS relays,
              l.obj AS lane, l.pid = pg_backend_pid() AS mine
         FROM (SELECT 1) one LEFT JOIN locks l ON l.key = $2`,
      [this.#memberKey, this.#laneKey],
    );
    const relays = Math.max(1, held.rows[0]?.relays ?? 1);
    const share = Math.ceil(OUTBOX_LANES / relays);
    const taken = new Set(held.rows.filter((r) => r.lane !== null && !r.mine).map((r) => r.lane));
    for (const lane of [...this.#owned].sort((a, b) => b - a)) {
      if (this.#owned.size <= share) break;
      await session.query('SELECT pg_advisory_unlock($1, $2)', [this.#laneKey, lane]);
      this.#owned.delete(lane);
      this.#heldBack.delete(lane);
    }
    // Start where this session's pid points, so relays starting together try different lanes first.
    const start = (session as unknown as { processID?: number }).processID ?? 0;
    for (let i = 0; i < OUTBOX_LANES && this.#owned.size < share; i++) {
      const lane = (start + i) % OUTBOX_LANES;
      if (this.#owned.has(lane) || taken.has(lane)) continue;
      const got = await session.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [
        this.#laneKey,
        lane,
      ]);
      if (got.rows[0]?.ok === true) this.#owned.add(lane);
    }
  }

  /**
   * Publishes and removes one batch of the owned lanes that are not held back; returns how many
   * rows it read. A lane whose publish fails keeps its rows (and is held back) without stopping
   * the others.
   */
  async #batch(session: pg.PoolClient): Promise<number> {
    const now = this.#clock.now();
    const lanes = [...this.#owned].filter((lane) => (this.#heldBack.get(lane)?.retryAt ?? 0) <= now);
    if (lanes.length === 0) return 0;
    // Losing this commit in a crash only republishes the batch, which the idempotent publish
    // absorbs: no need to wait for the WAL flush. One round trip for both statements.
    await session.query('BEGIN; SET LOCAL synchronous_commit = off');
    try {
      const rows = await session.query<OutboxRow>(
        `SELECT seq, message_id, kind, type, body, partition_key, ordered, lane, topic, deliver_at, require_route,
                attempts
           FROM ${this.#tables.outbox} WHERE lane = ANY($1::int[])
          ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [lanes, this.#batchSize],
      );
      const failures: RowFailure[] = [];
      const published = await this.#publishRows(rows.rows, failures);
      if (published.length > 0) {
        await session.query(`DELETE FROM ${this.#tables.outbox} WHERE seq = ANY($1::bigint[])`, [
          published.map((row) => row.seq),
        ]);
      }
      const parked: { failure: RowFailure; id: string }[] = [];
      for (const failure of failures) {
        const id = await this.#recordFailure(session, failure);
        if (id !== undefined) parked.push({ failure, id });
      }
      await session.query('COMMIT');
      this.#published += published.length;
      if (published.length > 0) this.#batches += 1;
      this.#parked += parked.length;
      for (const { failure, id } of parked) this.#logParked(failure, id);
      return rows.rows.length;
    } catch (error) {
      await session.query('ROLLBACK').catch(() => {
        this.#broken = true;
      });
      throw error;
    }
  }

  /**
   * Publishes `rows` in one publish; if that fails, lane by lane (side by side, each lane in seq
   * order), and in a lane whose publish failed for a reason of its rows, row by row up to the first
   * row that fails. Returns the rows published; the failed rows that count go to `failures`. A lane
   * stops at its first failure (held back) unless that row is to be parked, so order per lane holds.
   * A row published by a failed attempt goes out again: the idempotent publish absorbs it.
   */
  async #publishRows(rows: readonly OutboxRow[], failures: RowFailure[]): Promise<readonly OutboxRow[]> {
    if (rows.length === 0) return rows;
    try {
      await this.#publisher.publish(rows.map(outgoingOfRow), RELAY_ORIGIN);
      for (const row of rows) this.#heldBack.delete(row.lane);
      return rows;
    } catch {
      // Which lane failed is found below, and logged there.
    }
    const byLane = new Map<number, OutboxRow[]>();
    for (const row of rows) {
      const laneRows = byLane.get(row.lane);
      if (laneRows === undefined) byLane.set(row.lane, [row]);
      else laneRows.push(row);
    }
    const outcomes = await Promise.all(
      [...byLane].map(async ([lane, laneRows]) => {
        try {
          await this.#publisher.publish(laneRows.map(outgoingOfRow), RELAY_ORIGIN);
          this.#heldBack.delete(lane);
          return laneRows;
        } catch (error) {
          if (isOutboxOutage(error)) {
            this.#holdBack(lane, laneRows, error);
            return [];
          }
        }
        return this.#publishLaneRowByRow(lane, laneRows, failures);
      }),
    );
    return outcomes.flat();
  }

  /** Publishes a lane's rows one at a time, up to the first that fails; see {@link #publishRows}. */
  async #publishLaneRowByRow(
    lane: number,
    laneRows: readonly OutboxRow[],
    failures: RowFailure[],
  ): Promise<OutboxRow[]> {
    const published: OutboxRow[] = [];
    for (const [i, row] of laneRows.entries()) {
      try {
        await this.#publisher.publish([outgoingOfRow(row)], RELAY_ORIGIN);
        published.push(row);
        continue;
      } catch (error) {
        if (isOutboxOutage(error)) {
          this.#holdBack(lane, laneRows.slice(i), error);
          return published;
        }
        const malformed = malformedOutboxRow(row);
        const at = this.#clock.now();
        failures.push({ row, error, malformed, at });
        if (malformed === undefined && row.attempts + 1 < this.#maxAttempts) {
          // Counted, not parked: the lane waits for this row.
          const cap = Math.max(ROW_RETRY_CAP_MS, this.#retryDelayMs);
          const pause = Math.min(cap, this.#retryDelayMs * 2 ** Math.min(row.attempts, 16));
          this.#holdBack(lane, laneRows.slice(i), error, pause, row.attempts + 1);
          return published;
        }
        // Parked in this transaction: the rows behind it go on.
      }
    }
    this.#heldBack.delete(lane);
    return published;
  }

  /**
   * Counts a failed try of `failure.row` in its row, or moves the row to the parked rows when it is
   * malformed or has used its tries; returns the parked row's id then.
   */
  async #recordFailure(session: pg.PoolClient, failure: RowFailure): Promise<string | undefined> {
    const { row, error, malformed, at: now } = failure;
    const message = malformed ?? (error instanceof Error ? error.message : String(error));
    const attempts = row.attempts + 1;
    if (malformed === undefined && attempts < this.#maxAttempts) {
      await session.query(
        `UPDATE ${this.#tables.outbox}
            SET attempts = $2, first_failed_at = coalesce(first_failed_at, $3), last_failed_at = $3, last_error = $4
          WHERE seq = $1`,
        [row.seq, attempts, now, message],
      );
      return undefined;
    }
    const code = malformed !== undefined ? null : HarrierError.is(error) ? error.code : null;
    const parked = await session.query<{ id: string }>(
      `WITH moved AS (DELETE FROM ${this.#tables.outbox} WHERE seq = $1 RETURNING *)
       INSERT INTO ${this.#tables.outboxParked}
         (message_id, kind, type, body, partition_key, ordered, lane, topic, deliver_at, require_route,
          created_at, attempts, reason, error_code, error, first_failed_at, last_failed_at, parked_at)
       SELECT message_id, kind, type, body, partition_key, ordered, lane, topic, deliver_at, require_route,
              created_at, $2, $3, $4, $5, coalesce(first_failed_at, $6), $6, $6
         FROM moved
       RETURNING id`,
      [row.seq, attempts, malformed !== undefined ? 'malformed' : 'failed', code, message, now],
    );
    return parked.rows[0]?.id;
  }

  #logParked({ row, error, malformed }: RowFailure, id: string): void {
    this.#logger.error(
      `Outbox relay parked message ${row.message_id} (${row.type}) ${malformed !== undefined ? 'as malformed' : `after ${row.attempts + 1} failed tries`}; the rows behind it in lane ${row.lane} go on. See it with \`harrier postgres outbox show ${id}\`, replay it with \`harrier postgres outbox replay ${id}\``,
      {
        parkedId: id,
        lane: row.lane,
        messageId: row.message_id,
        type: row.type,
        attempts: row.attempts + 1,
        error: malformed ?? (error instanceof Error ? error.message : String(error)),
      },
    );
  }

  /**
   * Holds `lane` back after a failed publish, its rows left in place: 100 ms doubling to 5 s for an
   * outage, `pause` for a row's counted failure.
   */
  #holdBack(
    lane: number,
    rows: readonly OutboxRow[],
    error: unknown,
    pause?: number,
    attempts?: number,
  ): void {
    const failures = (this.#heldBack.get(lane)?.failures ?? 0) + 1;
    const wait = pause ?? Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(failures - 1, 16));
    this.#heldBack.set(lane, { failures, retryAt: this.#clock.now() + wait });
    this.#logger.warn(
      `Outbox relay could not publish lane ${lane}; its rows stay in the outbox, the lane is retried in ${wait} ms and the other lanes go on`,
      {
        lane,
        messageId: rows[0]?.message_id,
        type: rows[0]?.type,
        error: error instanceof Error ? error.message : String(error),
        failures,
        ...(attempts !== undefined ? { attempts, maxAttempts: this.#maxAttempts } : {}),
      },
    );
  }
}

/**
 * Starts an outbox relay: publishes the rows that committed transactions recorded in the outbox
 * (by {@link PostgresOutbox} or `postgresUnitOfWork`), until `stop()`.
 *
 * @throws HarrierError `invalid-option` naming the fix for a bad option, `schema-outdated` when the
 *   schema is not migrated, `postgres-unavailable` when PostgreSQL cannot be reached at start.
 * @example
 * ```ts
 * const relay = await startOutboxRelay({ connection: process.env.DATABASE_URL!, publisher: bus.publisher });
 * // ...
 * await relay.stop();
 * ```
 */
export function startOutboxRelay(options: OutboxRelayOptions): Promise<OutboxRelay> {
  return OutboxRelay.start(options);
}
