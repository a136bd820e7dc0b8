import type pg from 'pg';
import type {
  BrokerCapabilities,
  Delivery,
  MessageBroker,
  NackOptions,
  OutgoingMessage,
  QueueDepth,
  ReceiverOptions,
  RedeliveryTarget,
  SubscriptionSpec,
} from '../../broker/message-broker.js';
import { MAX_ATTEMPT_HISTORY, type AttemptRecord } from '../../broker/message-broker.js';
import { parseAttemptHistory } from '../../broker/delivery-facts.js';
import { commandQueue, subscriptionQueue } from '../../broker/queue-names.js';
import { systemClock, type Clock } from '../../clock/clock.js';
import { sleep } from '../../clock/sleep.js';
import { assertWholeOption } from '../../broker/whole-option.js';
import { HarrierError } from '../../errors/harrier-error.js';
import { StaleDeliveryError } from '../../errors/stale-delivery-error.js';
import { consoleLogger, type Logger } from '../../logging/logger.js';
import { registerHandoffTarget } from '../broker-handoff.js';
import { holdClient } from '../held-client.js';
import { requireSchema } from '../migrate-postgres.js';
import type { PostgresConnectionOptions } from '../postgres-connection.js';
import { openPool, postgresError, type PoolHandle } from '../postgres-pool.js';
import { postgresTables, type PostgresTables } from '../postgres-schema.js';
import { brokerChannel } from './broker-channel.js';
import { cancelRows } from './cancel-rows.js';
import { BrokerListener } from './broker-listener.js';
import { CommandRouteRows, insertMessages } from './insert-messages.js';
import { deliveryOfRow, parseDeliveryId } from './queue-row.js';
import { assertQueueNamePart, orderedCommandLane, receiverLanes } from './receiver-lanes.js';
import { PostgresReceiver, type PostgresReceiverContext } from './postgres-receiver.js';
import {
  deleteDelivered,
  deleteDeliveredMany,
  readDelivered,
  releaseMany,
  renewLeases,
  returnDelivered,
} from './settle-rows.js';
import { nextDue, takeRows } from './take-rows.js';

/** How long `redeliver` waits for a delivery of the message to settle before refusing. */
const REDELIVER_ACTIVE_WAIT_MS = 2_000;
const REDELIVER_ACTIVE_POLL_MS = 25;
/** How often expired dedupe rows are deleted, and how many at most per statement. */
const DEDUPE_PRUNE_INTERVAL_MS = 60_000;
const DEDUPE_PRUNE_BATCH = 10_000;
/** How long a publish trusts a command route it read without reading it again (as BullMqBroker). */
const COMMAND_ROUTE_MAX_AGE_MS = 1_000;
/** The most acks one delete makes. */
const ACK_BATCH = 500;

/** Options of {@link PostgresBroker}. */
export interface PostgresBrokerOptions {
  /**
   * Where PostgreSQL is: a `postgres://` URL or pool options (the broker opens a pool and ends it on
   * close), or a `pg.Pool` to share (left open). The broker holds one of its connections for LISTEN
   * for as long as it is open.
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema of Harrier's tables (migrated to the current version: `harrier postgres migrate`).
   * Every process sharing the queues uses the same one.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * How long a receiver's hold on a delivery (its lease) lasts unless renewed, in ms. The broker
   * renews the leases of the deliveries it holds every third of this; a lease that runs out (the
   * process died, or lost PostgreSQL for that long) makes the message takeable again, and that
   * delivery counts as an attempt and an unsettled end. At least 300.
   * @defaultValue 30000
   */
  readonly leaseMs?: number;
  /**
   * How often each receiver looks for due messages without a NOTIFY, in ms: the fallback for a
   * notification missed (across a reconnect) and for rows another process made due without one (a
   * retry's time passing). At least 10.
   * @defaultValue 1000
   */
  readonly pollIntervalMs?: number;
  /**
   * How long a published message id is remembered per queue to drop a second publish of it, in ms
   * (idempotent publish); 0 remembers nothing. Messages with `dedupe: 'while-queued'` get the same
   * window here.
   * @defaultValue 86400000 (24 hours)
   */
  readonly dedupeWindowMs?: number;
  /**
   * The clock of due times, leases and dedupe windows. Every process sharing the queues compares
   * times of its own clock with the others': keep hosts' clocks in sync (NTP).
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
  /**
   * Where outages and dropped facts are reported.
   * @defaultValue consoleLogger
   */
  readonly logger?: Logger;
}

/** A delivery out and not settled yet, as the broker that took it knows it. */
interface Held {
  readonly receiver: PostgresReceiver;
  readonly seq: string;
  readonly token: string;
  readonly attempt: number;
  readonly history: readonly AttemptRecord[];
}

/**
 * The PostgreSQL broker: durable, shared queues in the application's own database, with nothing
 * else to run.
 *
 * @remarks
 * Each copy of a message is a row of the `queue` table; receivers take due rows with `FOR UPDATE
 * SKIP LOCKED` under a renewed lease, wake on LISTEN/NOTIFY (with a fallback poll), and settle by
 * deleting or updating the row under its delivery token. See docs/postgres.md.
 * @example
 * ```ts
 * const broker = new PostgresBroker({ connection: process.env.DATABASE_URL! });
 * const bus = createBus({ broker, endpoint: 'orders', handlers: [PlaceOrderHandler] });
 * ```
 */
export class PostgresBroker implements MessageBroker {
  readonly #connection: PostgresConnectionOptions;
  readonly #tables: PostgresTables;
  readonly #handle: PoolHandle;
  readonly #leaseMs: number;
  readonly #pollIntervalMs: number;
  readonly #dedupeWindowMs: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #listener: BrokerListener;
  readonly #registered = new Map<string, SubscriptionSpec[]>();
  readonly #receivers = new Set<PostgresReceiver>();
  readonly #held = new Map<string, Held>();
  /**
   * Settles that could not reach PostgreSQL, by delivery id: the broker makes them itself once it
   * answers (before its next take, and on every renewal tick), so a message already handled is not
   * handled again and one given back does not wait for its lease, spending an attempt, to return.
   */
  readonly #unsettled = new Map<string, (db: pg.Pool) => Promise<boolean>>();
  #settlingLeftOvers: Promise<void> | undefined;
  #ready: Promise<void> | undefined;
  #cancelRenew: (() => void) | undefined;
  #cancelPrune: (() => void) | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;
  /** Lanes published to whose NOTIFY is still to be sent, and the notifier sending them. */
  readonly #toNotify = new Set<string>();
  /** Command routes publishes read, trusted for a second. */
  readonly #commandRoutes = new CommandRouteRows(COMMAND_ROUTE_MAX_AGE_MS);
  #notifying: Promise<void> | undefined;
  #notifyFailed = false;
  /** Acks waiting for the next batched delete, and the loop running them. */
  readonly #acks: {
    readonly seq: string;
    readonly token: string;
    readonly resolve: (done: boolean) => void;
    readonly reject: (error: unknown) => void;
  }[] = [];
  #acking: Promise<void> | undefined;

  /** @throws HarrierError `invalid-option` naming the fix for a bad option. */
  constructor(options: PostgresBrokerOptions) {
    if ((options as Partial<PostgresBrokerOptions> | undefined)?.connection === undefined) {
      throw new HarrierError(
        'invalid-option',
        'PostgresBroker needs a connection: pass { connection: process.env.DATABASE_URL } or your pg.Pool',
      );
    }
    this.#connection = options.connection;
    this.#tables = postgresTables(options.schema);
    this.#leaseMs = whole('leaseMs', options.leaseMs, 30_000, 300, 'e.g. 30000');
    this.#pollIntervalMs = whole('pollIntervalMs', options.pollIntervalMs, 1_000, 10, 'e.g. 1000');
    this.#dedupeWindowMs = whole(
      'dedupeWindowMs',
      options.dedupeWindowMs,
      86_400_000,
      0,
      'e.g. 86400000 for 24 hours (0 remembers nothing)',
    );
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? consoleLogger;
    this.#handle = openPool(options.connection, this.#logger);
    this.#listener = new BrokerListener(
      this.#handle.pool,
      brokerChannel(this.#tables),
      this.#clock,
      this.#logger,
      (lane) => {
        for (const receiver of this.#receivers) receiver.notify(lane);
      },
    );
    // postgresUnitOfWork({ broker }) inserts through this, in a handler's transaction.
    registerHandoffTarget({
      broker: this,
      tables: this.#tables,
      pool: this.#handle.pool,
      insert: (client, messages) =>
        insertMessages(client, this.#tables, messages, this.#clock.now(), this.#dedupeWindowMs),
    });
  }

  /** The schema of the broker's tables. */
  get schema(): string {
    return this.#tables.schema;
  }

  async register(endpoint: string, subscriptions: readonly SubscriptionSpec[]): Promise<void> {
    this.#assertOpen();
    assertQueueNamePart(endpoint, 'endpoint');
    for (const sub of subscriptions) assertQueueNamePart(sub.handler, 'handler name');
    await this.#whenReady();
    const rows: { kind: string; handler: string; type: string; ordered: boolean }[] = [];
    for (const sub of subscriptions) {
      const ordered = new Set(sub.orderedTypes ?? []);
      for (const type of sub.types)
        rows.push({ kind: sub.kind, handler: sub.handler, type, ordered: ordered.has(type) });
    }
    // Routes change here: publishes read them again (others' changes are read within a second).
    this.#commandRoutes.forget();
    await this.#transaction('registering subscriptions', async (client) => {
      await client.query(`DELETE FROM ${this.#tables.routes} WHERE endpoint = $1`, [endpoint]);
      if (rows.length === 0) return;
      await client.query(
        `INSERT INTO ${this.#tables.routes} (endpoint, kind, handler, type, ordered, registered_at)
         SELECT $1, kind, handler, type, ordered, $6 FROM unnest($2::text[], $3::text[], $4::text[], $5::bool[])
           AS r(kind, handler, type, ordered)
         ON CONFLICT DO NOTHING`,
        [
          endpoint,
          rows.map((r) => r.kind),
          rows.map((r) => r.handler),
          rows.map((r) => r.type),
          rows.map((r) => r.ordered),
          this.#clock.now(),
        ],
      );
    });
    this.#commandRoutes.forget();
    this.#registered.set(endpoint, [...subscriptions]);
  }

  receiver(options: ReceiverOptions): AsyncIterable<Delivery> {
    const specs = this.#registered.get(options.endpoint);
    if (specs === undefined) {
      throw new HarrierError(
        'not-registered',
        `Endpoint "${options.endpoint}" has not registered its subscriptions: call register() first (bus.start() does)`,
      );
    }
    const lanes = receiverLanes(options.endpoint, specs);
    return {
      [Symbol.asyncIterator]: () => {
        const receiver: PostgresReceiver = new PostgresReceiver(this.#receiverContext(), options, lanes, () =>
          this.#receivers.delete(receiver),
        );
        // Asked for once the broker is closed, a receiver ends at once.
        if (this.#closed) void receiver.close();
        else this.#receivers.add(receiver);
        return receiver;
      },
    };
  }

  async publish(message: OutgoingMessage): Promise<void> {
    await this.publishBatch([message]);
  }

  /** Publishes every message in one transaction: all of them, or (on `no-route` or an error) none. */
  async publishBatch(messages: readonly OutgoingMessage[]): Promise<void> {
    this.#assertOpen();
    if (messages.length === 0) return;
    await this.#whenReady();
    let lanes: readonly string[] = [];
    const written = (inserted: readonly string[]): void => {
      lanes = inserted;
    };
    if (messages.length === 1) {
      // One statement pair; a lone message needs no transaction of its own beyond the insert's.
      await this.#query('publishing', (db) =>
        insertMessages(
          db,
          this.#tables,
          messages,
          this.#clock.now(),
          this.#dedupeWindowMs,
          written,
          this.#commandRoutes,
        ),
      );
    } else {
      await this.#transaction('publishing', async (client) => {
        await insertMessages(
          client,
          this.#tables,
          messages,
          this.#clock.now(),
          this.#dedupeWindowMs,
          written,
          this.#commandRoutes,
        );
      });
    }
    this.#wake(lanes);
  }

  /**
   * After a publish committed: wakes this broker's receivers of `lanes` at once, and has the
   * notifier tell every other process's.
   *
   * @remarks
   * The publish itself sends no NOTIFY: PostgreSQL holds a database-wide lock from a transaction's
   * NOTIFY until its commit is flushed, so publishes notifying in their own transactions would
   * commit one after another. One NOTIFY transaction at a time is in flight instead, for every lane
   * published to since the previous one began, with `synchronous_commit` off (a notification lost
   * to a server crash costs a receiver's poll interval, nothing else).
   */
  #wake(lanes: readonly string[]): void {
    if (lanes.length === 0) return;
    for (const lane of lanes) {
      for (const receiver of this.#receivers) receiver.notify(lane);
      this.#toNotify.add(lane);
    }
    this.#startNotifying();
  }

  /** Runs the notifier unless it runs; lanes added as it ended are sent by the next one (as acks). */
  #startNotifying(): void {
    this.#notifying ??= this.#notifyLoop().finally(() => {
      this.#notifying = undefined;
      if (this.#toNotify.size > 0) this.#startNotifying();
    });
  }

  async #notifyLoop(): Promise<void> {
    const channel = literal(brokerChannel(this.#tables));
    while (this.#toNotify.size > 0) {
      const lanes = [...this.#toNotify];
      this.#toNotify.clear();
      // One round trip (the simple protocol runs the statements in turn); lanes and the channel
      // are queue names and a schema name, checked plain identifiers, quoted all the same.
      const notifies = lanes.map((lane) => `SELECT pg_notify(${channel}, ${literal(lane)});`).join(' ');
      try {
        const held = await holdClient(this.#handle.pool);
        try {
          await held.client.query(`BEGIN; SET LOCAL synchronous_commit TO off; ${notifies} COMMIT;`);
          held.release();
        } catch (error) {
          // The transaction may be left open (aborted) on the session: it is not given back.
          held.release(error instanceof Error ? error : true);
          throw error;
        }
        this.#notifyFailed = false;
      } catch (error) {
        if (!this.#notifyFailed && !this.#closed) {
          this.#logger.warn(
            'The PostgreSQL broker could not notify other processes of messages it published; their receivers find them when they next poll',
            { error: error instanceof Error ? error.message : String(error) },
          );
        }
        this.#notifyFailed = true;
      }
    }
  }

  ack(deliveryId: string): Promise<void> {
    return this.#settle(deliveryId, (db, seq, token) => this.#deleteAcked(db, seq, token));
  }

  /**
   * Deletes an acked row, in the next of the batched deletes: acks made while one runs wait for it
   * to end, then go in one statement together (at most {@link ACK_BATCH} rows). True when `token`
   * still held the row.
   */
  #deleteAcked(db: pg.Pool, seq: string, token: string): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.#acks.push({ seq, token, resolve, reject });
      this.#startAckLoop(db);
    });
  }

  /**
   * Runs the ack loop unless it runs. An ack pushed after the loop's last look at the queue and
   * before its `finally` (in that very turn: the next left-over settle is asked for as the previous
   * one resolves) is run by a loop started there; it would otherwise wait for ever, and every take
   * and lease renewal behind it.
   */
  #startAckLoop(db: pg.Pool): void {
    this.#acking ??= this.#ackLoop(db).finally(() => {
      this.#acking = undefined;
      if (this.#acks.length > 0) this.#startAckLoop(db);
    });
  }

  async #ackLoop(db: pg.Pool): Promise<void> {
    while (this.#acks.length > 0) {
      const batch = this.#acks.splice(0, ACK_BATCH);
      try {
        const deleted = await deleteDeliveredMany(
          db,
          this.#tables,
          batch.map((ack) => ack.seq),
          batch.map((ack) => ack.token),
        );
        const done = new Set<string>();
        const lanes = new Set<string>();
        for (const row of deleted) {
          done.add(row.seq);
          if (row.orderedLane !== null) lanes.add(row.orderedLane);
        }
        // The next row of an ordered key is due now.
        this.#wake([...lanes]);
        // A second ack of one delivery in the batch finds the row gone, as it would after the first.
        for (const ack of batch) ack.resolve(done.delete(ack.seq));
      } catch (error) {
        for (const ack of batch) ack.reject(error);
      }
    }
  }

  nack(deliveryId: string, options: NackOptions): Promise<void> {
    if ('deadLetter' in options)
      return this.#settle(deliveryId, (db, seq, token) => deleteDelivered(db, this.#tables, seq, token));
    const now = this.#clock.now();
    if ('release' in options)
      return this.#settle(deliveryId, (db, seq, token) =>
        returnDelivered(db, this.#tables, seq, token, { runAt: Math.max(now, options.retryAt ?? now), now }),
      );
    return this.#settle(deliveryId, async (db, seq, token) => {
      const known = this.#held.get(deliveryId);
      let attempt = known?.attempt;
      let history = known?.history;
      if (known === undefined) {
        // Delivered through another broker instance: read what the row holds.
        const row = await readDelivered(db, this.#tables, seq, token);
        if (row === undefined) return false;
        attempt = row.attempt;
        history = parseAttemptHistory(row.history).history;
      }
      const next =
        options.error === undefined
          ? (history ?? [])
          : [...(history ?? []), { attempt: attempt ?? 1, at: now, error: options.error }].slice(
              -MAX_ATTEMPT_HISTORY,
            );
      return returnDelivered(db, this.#tables, seq, token, {
        runAt: options.retryAt,
        now,
        retry: { history: next, pendingDeadLetter: options.pendingDeadLetter },
      });
    });
  }

  /**
   * Puts a message back into one subscription with attempt 1, as {@link MessageBroker.redeliver}
   * says: a copy still waiting (or waiting for its retry) is left as it is; one held by a receiver
   * is waited for (2 s) and refused with `message-in-flight` if still held then. Each try is one
   * transaction under an advisory lock on (queue, message id): replays of one message at once
   * queue one copy.
   */
  async redeliver(target: RedeliveryTarget): Promise<void> {
    this.#assertOpen();
    await this.#whenReady();
    const { message } = target;
    const queue =
      message.kind === 'event'
        ? subscriptionQueue(target.endpoint, target.handler)
        : commandQueue(message.type);
    const orderKey = message.ordered === true ? (message.partitionKey ?? '') : null;
    const waitUntil = Date.now() + REDELIVER_ACTIVE_WAIT_MS;
    for (;;) {
      const outcome = await this.#transaction('replaying the message', (client) =>
        this.#redeliverOnce(client, target, queue, orderKey),
      );
      if (outcome !== 'held') return;
      if (Date.now() >= waitUntil) {
        throw new HarrierError(
          'message-in-flight',
          `message ${message.id} is still being handled in queue ${queue} (held for ${REDELIVER_ACTIVE_WAIT_MS} ms): replay it again once it has settled`,
        );
      }
      await sleep(systemClock, REDELIVER_ACTIVE_POLL_MS);
    }
  }

  /**
   * One try of {@link PostgresBroker.redeliver} in `client`'s transaction: under an advisory lock on
   * (queue, message id), so concurrent replays of one message insert one copy, it inserts the copy
   * unless one is there already (`'left'`: waiting, or its lease ran out) or held (`'held'`).
   */
  async #redeliverOnce(
    client: pg.PoolClient,
    target: RedeliveryTarget,
    queue: string,
    orderKey: string | null,
  ): Promise<'inserted' | 'left' | 'held'> {
    const { message } = target;
    await client.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [`${queue}/${message.id}`]);
    const now = this.#clock.now();
    const found = await client.query<{ held: boolean }>(
      `SELECT delivery IS NOT NULL AND run_at > $3 AS held FROM ${this.#tables.queue} WHERE queue = $1 AND message_id = $2`,
      [queue, message.id, now],
    );
    if (found.rows.some((row) => !row.held)) return 'left'; // waiting, or its lease ran out: it comes again
    if (found.rows.length > 0) return 'held';
    let lane = queue;
    if (message.kind !== 'event') {
      const route = await client.query<{ ordered: boolean }>(
        `SELECT ordered FROM ${this.#tables.routes} WHERE endpoint = $1 AND kind = 'command' AND type = $2 AND ordered LIMIT 1`,
        [target.endpoint, message.type],
      );
      if (orderKey !== null && route.rows.length > 0) lane = orderedCommandLane(target.endpoint);
    }
    const ordered = lane !== queue || (message.kind === 'event' && orderKey !== null);
    // As a publish of an ordered message does (insert-messages.ts): seq order is commit order per key.
    if (ordered)
      await client.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [
        `${lane}/${orderKey ?? ''}`,
      ]);
    await client.query(
      `WITH ins AS (
         INSERT INTO ${this.#tables.queue} (queue, lane, endpoint, handler, message_id, kind, type, body,
                                            partition_key, order_key, run_at, replay_of, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $11) RETURNING lane)
       SELECT count(pg_notify($13, lane)::text) FROM ins`,
      [
        queue,
        lane,
        target.endpoint,
        message.kind === 'event' ? target.handler : null,
        message.id,
        message.kind,
        message.type,
        Buffer.from(message.body, 'utf8'),
        message.partitionKey ?? null,
        ordered ? orderKey : null,
        this.#clock.now(),
        target.deadLetterId ?? null,
        brokerChannel(this.#tables),
      ],
    );
    return 'inserted';
  }

  /**
   * Deletes every copy of message `messageId` still waiting for its time and never delivered, as
   * {@link MessageBroker.cancel} says; resolves to how many it deleted.
   *
   * @remarks
   * Its dedupe rows go with the copies, so the id can be published again to those queues. The lanes
   * of the deleted copies are woken: an ordered copy deleted may have held later messages of its key.
   */
  async cancel(messageId: string): Promise<number> {
    this.#assertOpen();
    await this.#whenReady();
    const lanes = await this.#query('cancelling a scheduled message', (db) =>
      cancelRows(db, this.#tables, messageId, this.#clock.now()),
    );
    this.#wake([...new Set(lanes)]);
    return lanes.length;
  }

  /**
   * Messages in each queue `endpoint` receives from (each command type's, each event
   * subscription's), by state: `waiting` due now, `active` held by a receiver, `delayed` due later.
   * The endpoint's subscriptions as this broker registered them, else as the `routes` table holds
   * them (an endpoint registered by another process: an admin tool's view).
   */
  async queueDepths(endpoint: string): Promise<readonly QueueDepth[]> {
    this.#assertOpen();
    await this.#whenReady();
    const specs = this.#registered.get(endpoint) ?? (await this.#registeredInDatabase(endpoint));
    const queues = receiverLanes(endpoint, specs).queues;
    const now = this.#clock.now();
    const result = await this.#query('counting messages', (db) =>
      db.query<{ queue: string; waiting: number; active: number; delayed: number }>(
        `SELECT queue,
                count(*) FILTER (WHERE delivery IS NULL AND run_at <= $2)::int AS waiting,
                count(*) FILTER (WHERE delivery IS NOT NULL)::int AS active,
                count(*) FILTER (WHERE delivery IS NULL AND run_at > $2)::int AS delayed
           FROM ${this.#tables.queue} WHERE queue = ANY($1::text[]) GROUP BY queue`,
        [queues, now],
      ),
    );
    const byQueue = new Map(result.rows.map((row) => [row.queue, row]));
    return queues.map((queue) => {
      const row = byQueue.get(queue);
      return { queue, waiting: row?.waiting ?? 0, active: row?.active ?? 0, delayed: row?.delayed ?? 0 };
    });
  }

  /**
   * Everything: the queues are rows in PostgreSQL, shared by every broker on the same schema, and a
   * delivery whose lease ran out goes back and counts as an attempt.
   */
  capabilities(): BrokerCapabilities {
    return {
      delayedDelivery: true,
      dedupeWindowMs: this.#dedupeWindowMs,
      orderedDelivery: true,
      queueDepths: true,
      redeliver: true,
      durable: true,
      shared: true,
      crashCounting: true,
      cancelScheduled: true,
    };
  }

  /**
   * Ends every receiver, gives the deliveries still held back to their queues, stops listening, and
   * ends the pool if the broker opened it.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      this.#cancelRenew?.();
      this.#cancelPrune?.();
      await Promise.all([...this.#receivers].map((r) => r.close()));
      // A loop may start another as it ends (see #startAckLoop): wait for the last.
      while (this.#acking !== undefined) await this.#acking;
      await this.#settleLeftOvers();
      const held = [...this.#held.values()];
      this.#held.clear();
      await releaseMany(this.#handle.pool, this.#tables, held, this.#clock.now()).catch((error: unknown) => {
        this.#logger.warn(
          'The PostgreSQL broker could not give back the deliveries it held; their leases run out instead',
          {
            error: error instanceof Error ? error.message : String(error),
          },
        );
      });
      while (this.#notifying !== undefined) await this.#notifying;
      await this.#listener.close();
      await this.#handle.end();
    })();
    return this.#closing;
  }

  /** An endpoint's subscriptions as the `routes` table holds them. */
  async #registeredInDatabase(endpoint: string): Promise<SubscriptionSpec[]> {
    const result = await this.#query('reading subscriptions', (db) =>
      db.query<{ kind: 'command' | 'event'; handler: string; types: string[] }>(
        `SELECT kind, handler, array_agg(type ORDER BY type) AS types FROM ${this.#tables.routes}
          WHERE endpoint = $1 GROUP BY kind, handler`,
        [endpoint],
      ),
    );
    return result.rows.map((row) => ({ kind: row.kind, handler: row.handler, types: row.types }));
  }

  #receiverContext(): PostgresReceiverContext {
    return {
      clock: this.#clock,
      logger: this.#logger,
      pollIntervalMs: this.#pollIntervalMs,
      ready: () => this.#whenReady(),
      take: (receiver, limit) => this.#take(receiver, limit),
      nextDue: (lanes) => nextDue(this.#handle.pool, this.#tables, lanes, this.#clock.now()),
      release: (ids) => this.#releaseUntaken(ids),
      describeError: (error) => postgresError(error, this.#connection, 'taking messages'),
    };
  }

  async #take(receiver: PostgresReceiver, limit: number): Promise<Delivery[]> {
    // First what an outage left unsettled: a message given back then is taken with its attempt as it was.
    await this.#settleLeftOvers();
    const now = this.#clock.now();
    const rows = await takeRows(
      this.#handle.pool,
      this.#tables,
      receiver.lanes,
      limit,
      now,
      now + this.#leaseMs,
    );
    const deliveries: Delivery[] = [];
    for (const row of rows) {
      const { delivery, dropped } = deliveryOfRow(row, receiver.endpoint);
      if (dropped.length > 0) {
        this.#logger.warn('Malformed delivery facts in a queue row were dropped', {
          queue: row.queue,
          seq: row.seq,
          fields: dropped,
        });
      }
      this.#held.set(delivery.id, {
        receiver,
        seq: row.seq,
        token: row.delivery,
        attempt: delivery.facts.attempt,
        history: delivery.facts.history,
      });
      deliveries.push(delivery);
    }
    return deliveries;
  }

  /** Gives back deliveries a receiver took and never handed over (it closed first). */
  async #releaseUntaken(ids: readonly string[]): Promise<void> {
    const held: Held[] = [];
    for (const id of ids) {
      const entry = this.#held.get(id);
      if (entry === undefined) continue;
      this.#held.delete(id);
      held.push(entry);
    }
    await releaseMany(this.#handle.pool, this.#tables, held, this.#clock.now()).catch((error: unknown) => {
      this.#logger.warn(
        'The PostgreSQL broker could not give back deliveries; their leases run out instead',
        {
          error: error instanceof Error ? error.message : String(error),
        },
      );
    });
  }

  /**
   * Runs a settle: `apply` resolves false when the token no longer holds the row, which rejects with
   * StaleDeliveryError. Its own promise (I/O), never `SETTLED`.
   */
  async #settle(
    deliveryId: string,
    apply: (db: pg.Pool, seq: string, token: string) => Promise<boolean>,
  ): Promise<void> {
    const parsed = parseDeliveryId(deliveryId);
    if (parsed === undefined) throw new StaleDeliveryError(deliveryId);
    if (this.#closed) {
      throw new HarrierError(
        'broker-closed',
        'The PostgreSQL broker is closed: its deliveries went back to their queues',
      );
    }
    let done: boolean;
    const settle = (db: pg.Pool): Promise<boolean> => apply(db, parsed.seq, parsed.token);
    try {
      done = await this.#query('settling a delivery', settle);
      this.#unsettled.delete(deliveryId);
    } catch (error) {
      // The dispatcher tries again for a while, then gives up; either way it is made once PostgreSQL answers.
      if (HarrierError.is(error) && error.code === 'postgres-unavailable')
        this.#unsettled.set(deliveryId, settle);
      throw error;
    } finally {
      // Settled or not, the handler is done with it: a settle that failed is tried again by the
      // dispatcher under the same token (which needs no entry here) or given up on, and then only
      // the lease running out brings the message back, so it must no longer be renewed.
      const held = this.#held.get(deliveryId);
      if (held !== undefined) {
        this.#held.delete(deliveryId);
        held.receiver.settled();
      }
    }
    if (!done) throw new StaleDeliveryError(deliveryId);
  }

  /** Renews the leases of every held delivery; those no longer held are dropped (their slots freed). */
  /** Makes the settles left over from an outage, in order, until one still cannot reach PostgreSQL. */
  #settleLeftOvers(): Promise<void> {
    if (this.#unsettled.size === 0) return Promise.resolve();
    this.#settlingLeftOvers ??= (async () => {
      for (const [id, settle] of [...this.#unsettled]) {
        try {
          // false: its lease ran out and another delivery took the row; nothing left to do either way.
          await settle(this.#handle.pool);
        } catch {
          return;
        }
        if (this.#unsettled.get(id) === settle) this.#unsettled.delete(id);
      }
    })().finally(() => {
      this.#settlingLeftOvers = undefined;
    });
    return this.#settlingLeftOvers;
  }

  async #renew(): Promise<void> {
    await this.#settleLeftOvers();
    const held = [...this.#held];
    if (held.length === 0) return;
    let still: Set<string>;
    try {
      still = await renewLeases(
        this.#handle.pool,
        this.#tables,
        held.map(([, h]) => h),
        this.#clock.now() + this.#leaseMs,
      );
    } catch (error) {
      this.#logger.warn('The PostgreSQL broker could not renew its leases; retrying', {
        error: error instanceof Error ? error.message : String(error),
        deliveries: held.length,
      });
      return;
    }
    for (const [id, entry] of held) {
      if (still.has(`${entry.seq}:${entry.token}`)) continue;
      // Settled meanwhile (then already gone from the map), or lost: another receiver took it.
      if (this.#held.get(id) === entry) {
        this.#held.delete(id);
        entry.receiver.settled();
      }
    }
  }

  #armRenew(): void {
    this.#cancelRenew = this.#clock.setTimer(Math.floor(this.#leaseMs / 3), () => {
      void this.#renew().finally(() => {
        if (!this.#closed) this.#armRenew();
      });
    });
  }

  #armPrune(): void {
    this.#cancelPrune = this.#clock.setTimer(DEDUPE_PRUNE_INTERVAL_MS, () => {
      void this.#handle.pool
        .query(
          `DELETE FROM ${this.#tables.dedupe} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${this.#tables.dedupe} WHERE expires_at <= $1 LIMIT ${DEDUPE_PRUNE_BATCH})) AND expires_at <= $1`,
          [this.#clock.now()],
        )
        .catch((error: unknown) => {
          this.#logger.debug('The PostgreSQL broker could not prune its dedupe rows; it tries again later', {
            error: error instanceof Error ? error.message : String(error),
          });
        })
        .finally(() => {
          if (!this.#closed) this.#armPrune();
        });
    });
  }

  /** Checks the schema and starts listening, once; a failure is retried by the next call. */
  #whenReady(): Promise<void> {
    this.#ready ??= (async () => {
      try {
        await requireSchema(this.#handle.pool, this.#tables, 'The PostgreSQL broker');
      } catch (error) {
        throw postgresError(error, this.#connection, 'starting the PostgreSQL broker');
      }
      if (this.#closed) return;
      await this.#listener.start();
      if (this.#isClosed()) return;
      this.#armRenew();
      this.#armPrune();
    })().catch((error: unknown) => {
      this.#ready = undefined;
      throw error;
    });
    return this.#ready;
  }

  async #query<T>(doing: string, run: (db: pg.Pool) => Promise<T>): Promise<T> {
    try {
      return await run(this.#handle.pool);
    } catch (error) {
      throw postgresError(error, this.#connection, doing);
    }
  }

  async #transaction<T>(doing: string, run: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    let held;
    try {
      held = await holdClient(this.#handle.pool);
    } catch (error) {
      throw postgresError(error, this.#connection, doing);
    }
    try {
      await held.client.query('BEGIN');
      const result = await run(held.client);
      await held.client.query('COMMIT');
      held.release();
      return result;
    } catch (error) {
      const rolledBack = await held.client.query('ROLLBACK').then(
        () => true,
        () => false,
      );
      held.release(!rolledBack);
      throw postgresError(error, this.#connection, doing);
    }
  }

  /** Read through a call: close() flips it while an operation awaits. */
  #isClosed(): boolean {
    return this.#closed;
  }

  #assertOpen(): void {
    if (this.#closed)
      throw new HarrierError(
        'broker-closed',
        'The PostgreSQL broker is closed: create a new one to publish again',
      );
  }
}

/** @throws HarrierError `invalid-option` unless `value` (or its default) is a whole number of at least `min`. */
function whole(
  option: string,
  value: number | undefined,
  fallback: number,
  min: number,
  example: string,
): number {
  const v = value ?? fallback;
  assertWholeOption('PostgresBroker', option, v, min, `${example} (or leave it out for ${fallback})`);
  return v;
}

/** `value` as an SQL string literal, whatever the session's `standard_conforming_strings`. */
function literal(value: string): string {
  return `E'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}
