import type pg from 'pg';
import { toErrorInfo } from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import type {
  TransactionalUnitOfWork,
  UnitOfWorkBus,
  UnitOfWorkCall,
  UnitOfWorkResult,
} from '../dispatch/transactional-unit-of-work.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerKind } from '../handlers/handler-metadata.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import type { PostgresBroker } from './broker/postgres-broker.js';
import { BrokerHandoff, handoffTargetOf } from './broker-handoff.js';
import { holdClient, type HeldClient } from './held-client.js';
import { requireSchema } from './migrate-postgres.js';
import { writeOutboxRows } from './outbox-rows.js';
import { raiseCheckpoint } from './postgres-checkpoint-store.js';
import type { PostgresConnectionOptions } from './postgres-connection.js';
import { isPostgresUnavailable, openPool, postgresError, type PoolHandle } from './postgres-pool.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';
import { holdGeneration } from './projection-generation-rows.js';
import { beginSession, endSession } from './postgres-session.js';

/** Default of {@link PostgresUnitOfWorkOptions.inboxRetentionMs}: 7 days. */
export const DEFAULT_INBOX_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

/** Default of {@link PostgresUnitOfWorkOptions.inboxPruneIntervalMs}: 1 hour. */
export const DEFAULT_INBOX_PRUNE_INTERVAL_MS = 60 * 60 * 1000;

/**
 * The handler kinds a unit can wrap (saga steps reach it only when the bus's saga store joined it:
 * a `PostgresSagaStore` on the unit's database and schema).
 */
const WRAPPABLE_KINDS: readonly HandlerKind[] = ['command', 'event', 'projection', 'saga', 'query'];

/** What a `PostgresSagaStore` needs of a unit to join it: where its transactions run. */
export interface UnitTarget {
  readonly pool: pg.Pool;
  readonly schema: string;
  readonly connection: PostgresConnectionOptions;
  /** Whether the unit runs saga steps (its `kinds`). */
  readonly sagas: boolean;
  /** Checks the unit's schema (see {@link PostgresUnitOfWork.ready}). */
  ready(): Promise<void>;
}

/** The target of each unit {@link postgresUnitOfWork} made. */
const targets = new WeakMap<object, UnitTarget>();

/** Where `unit` runs its transactions, when {@link postgresUnitOfWork} made it; else undefined. */
export function unitTargetOf(unit: object): UnitTarget | undefined {
  return targets.get(unit);
}

/** Options of {@link postgresUnitOfWork}. */
export interface PostgresUnitOfWorkOptions {
  /**
   * Where PostgreSQL is. Give the application's own `pg.Pool` (shared, never ended by the unit) so
   * handlers and plain application code use one pool; a URL or pool options make a pool of the
   * unit's own, ended by {@link PostgresUnitOfWork.close}.
   * @defaultValue none; required
   */
  readonly connection: PostgresConnectionOptions;
  /**
   * The schema of Harrier's tables (inbox, outbox, checkpoints), migrated beforehand with `harrier
   * postgres migrate`. The handler's own tables may live anywhere in the same database.
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * Keep an inbox row per (subscription, message id) in each command and event handler's
   * transaction (and a projection's fed by the broker rather than an event log), so a delivery whose transaction committed before is acked without running the
   * handler again. The subscription is `<endpoint>/<handler name>`. `execute` calls (in process,
   * never redelivered) skip it.
   * @defaultValue true
   */
  readonly inbox?: boolean;
  /**
   * Write the messages a handler records into the outbox in its transaction (published by the
   * outbox relay) instead of letting the pipeline publish them after the commit.
   *
   * @remarks
   * Keep it on with the inbox: without it, a process that dies after the commit and before the
   * publish loses the recorded messages, since the redelivery is skipped by the inbox.
   * @defaultValue true
   */
  readonly outbox?: boolean;
  /**
   * The bus's `PostgresBroker`, when its tables are in this database: what a handler records is
   * then inserted into the broker's queue in the handler's transaction (routes, dedupe, delays and
   * fan-out as the broker's publish), with no outbox and no relay. See docs/postgres-outbox.md.
   *
   * @remarks
   * `bus.start()` checks that the bus publishes through this broker, has no `eventLog`, and that the
   * broker's pool reaches this unit's database; otherwise it fails with HarrierError
   * `invalid-option` naming the fix. Not with `outbox: false`.
   * @defaultValue none: recorded messages go to the outbox (or, with `outbox: false`, are published
   *   by the pipeline after the commit)
   */
  readonly broker?: PostgresBroker;
  /**
   * The handler kinds whose calls run in a transaction; other calls run as without a unit.
   * `'query'` may be added (a query handler then reads in a transaction of its own). `'saga'` takes
   * effect only with a `PostgresSagaStore` on the unit's database and schema (checked when the bus
   * starts); leave it out to keep saga state apart from the unit.
   * @defaultValue ['command', 'event', 'projection', 'saga']
   */
  readonly kinds?: readonly HandlerKind[];
  /**
   * How long an inbox row is kept, in ms. A message redelivered after its row was pruned runs again:
   * keep it well above the longest a message can stay in flight (retries, backoff, a broker outage).
   * @defaultValue 604800000 (7 days)
   */
  readonly inboxRetentionMs?: number;
  /**
   * How often the unit prunes inbox rows older than {@link inboxRetentionMs}, in ms, from its first
   * call until {@link PostgresUnitOfWork.close}. 0 turns it off (call
   * {@link PostgresUnitOfWork.prune} from a job of your own).
   * @defaultValue 3600000 (1 hour)
   */
  readonly inboxPruneIntervalMs?: number;
  /** Source of `handled_at`, `created_at` and `updated_at` times and of the prune timer. @defaultValue the system clock */
  readonly clock?: Clock;
  /**
   * Where a failed periodic prune, a session PostgreSQL ended under a handler and a lost idle
   * connection of the unit's own pool are reported.
   * @defaultValue warnings and errors as JSON lines on stderr
   */
  readonly logger?: Logger;
}

/**
 * The unit of work {@link postgresUnitOfWork} returns: a {@link TransactionalUnitOfWork} for
 * `BusOptions.unitOfWork`, with its own life cycle.
 */
export interface PostgresUnitOfWork extends TransactionalUnitOfWork {
  /** The schema of the inbox, outbox and checkpoint tables it writes. */
  readonly schema: string;
  /**
   * Checks the schema now (the first call does it otherwise): call it at start-up to fail fast.
   * @throws HarrierError `schema-outdated` naming the migrate command, `postgres-unavailable`.
   */
  ready(): Promise<void>;
  /**
   * Removes inbox rows handled before `nowMs - inboxRetentionMs`; returns how many.
   * @param nowMs - @defaultValue the clock's now
   */
  prune(nowMs?: number): Promise<number>;
  /** Stops the periodic prune and ends the pool when the unit opened it. Calls after it reject. */
  close(): Promise<void>;
}

/** The inbox key of a call's subscription: `<endpoint>/<handler name>`. */
export function inboxSubscription(call: Pick<UnitOfWorkCall, 'endpoint' | 'handler'>): string {
  return `${call.endpoint}/${call.handler}`;
}

function checkOptions(options: PostgresUnitOfWorkOptions): void {
  for (const name of ['inboxRetentionMs', 'inboxPruneIntervalMs'] as const) {
    const value = options[name];
    if (value === undefined) continue;
    if (!Number.isFinite(value) || value < (name === 'inboxRetentionMs' ? 1 : 0)) {
      throw new HarrierError(
        'invalid-option',
        `postgresUnitOfWork: ${name} is ${value}: give a number of ms ${name === 'inboxRetentionMs' ? 'above 0 (default 7 days)' : 'from 0 (0 turns the periodic prune off; default 1 hour)'}`,
      );
    }
  }
  if (options.broker !== undefined && options.outbox === false) {
    throw new HarrierError(
      'invalid-option',
      'postgresUnitOfWork: broker and outbox: false contradict each other (broker stores recorded messages in its queue in the transaction, outbox: false publishes them after the commit): remove one',
    );
  }
  for (const kind of options.kinds ?? []) {
    if (!WRAPPABLE_KINDS.includes(kind)) {
      throw new HarrierError(
        'invalid-option',
        `postgresUnitOfWork: kinds holds "${kind}", which never runs in a unit of work: use some of ${WRAPPABLE_KINDS.join(', ')}`,
      );
    }
  }
}

/**
 * Whether a call takes an inbox row: a delivery (not `execute`) to a command or event handler or a
 * saga, or to a projection fed by the broker (a bus without an event log: no checkpoint to skip by).
 */
function takesInbox(call: UnitOfWorkCall): boolean {
  if (call.inProcess) return false;
  const kind = call.handlerKind;
  return (
    kind === 'command' ||
    kind === 'event' ||
    kind === 'saga' ||
    (kind === 'projection' && call.position === undefined)
  );
}

class PostgresUnit implements PostgresUnitOfWork {
  readonly name = 'postgres';
  readonly schema: string;
  readonly #connection: PostgresConnectionOptions;
  readonly #handle: PoolHandle;
  readonly #tables: PostgresTables;
  readonly #inbox: boolean;
  readonly #outbox: boolean;
  readonly #handoff: BrokerHandoff | undefined;
  readonly #kinds: ReadonlySet<HandlerKind>;
  readonly #retentionMs: number;
  readonly #pruneEveryMs: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  #ready: Promise<void> | undefined;
  #cancelPrune: (() => void) | undefined;
  #closed = false;

  constructor(options: PostgresUnitOfWorkOptions) {
    checkOptions(options);
    this.#tables = postgresTables(options.schema);
    this.schema = this.#tables.schema;
    this.#connection = options.connection;
    this.#inbox = options.inbox ?? true;
    this.#outbox = options.outbox ?? true;
    this.#handoff =
      options.broker === undefined ? undefined : new BrokerHandoff(handoffTargetOf(options.broker));
    this.#kinds = new Set(options.kinds ?? ['command', 'event', 'projection', 'saga']);
    this.#retentionMs = options.inboxRetentionMs ?? DEFAULT_INBOX_RETENTION_MS;
    this.#pruneEveryMs = options.inboxPruneIntervalMs ?? DEFAULT_INBOX_PRUNE_INTERVAL_MS;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? consoleLogger;
    this.#handle = openPool(options.connection, this.#logger);
    targets.set(this, {
      pool: this.#handle.pool,
      schema: this.schema,
      connection: this.#connection,
      sagas: this.#kinds.has('saga'),
      ready: () => this.ready(),
    });
  }

  async attach(bus: UnitOfWorkBus): Promise<void> {
    if (this.#handoff === undefined) return;
    this.#checkOpen();
    await this.ready();
    try {
      await this.#handoff.attach(bus, this.#handle.pool);
    } catch (error) {
      throw postgresError(error, this.#connection, "checking the broker's database");
    }
  }

  ready(): Promise<void> {
    this.#ready ??= requireSchema(this.#handle.pool, this.#tables, 'postgresUnitOfWork').then(
      () => {
        this.#schedulePrune();
      },
      (error: unknown) => {
        // Checked again on the next call: the schema may be migrated meanwhile.
        this.#ready = undefined;
        throw postgresError(error, this.#connection, 'checking the schema');
      },
    );
    return this.#ready;
  }

  async run(call: UnitOfWorkCall): Promise<UnitOfWorkResult> {
    if (!this.#kinds.has(call.handlerKind)) {
      await call.run();
      return 'ran';
    }
    this.#checkOpen();
    await this.ready();
    let held: HeldClient;
    try {
      held = await holdClient(this.#handle.pool, (error) => {
        this.#logger.warn(
          `PostgreSQL ended the session of handler "${call.handler}" in its transaction; the attempt fails and is retried`,
          { handler: call.handler, messageId: call.context.messageId, error: error.message },
        );
      });
    } catch (error) {
      throw postgresError(error, this.#connection, `starting the transaction of handler "${call.handler}"`);
    }
    const { client } = held;
    // A client whose connection may be broken is destroyed rather than returned to the pool.
    let broken: Error | undefined;
    /** The end of a timed-out call's server process, released after (see #endBackend). */
    let ending: Promise<void> | undefined;
    try {
      await client.query('BEGIN');
      let result: UnitOfWorkResult;
      try {
        result = await this.#inTransaction(client, call);
      } catch (error) {
        if (HarrierError.is(error, 'handler-timeout')) {
          // The timed-out handler may still run a statement on this client, and a ROLLBACK would
          // queue behind it (holding the delivery's slot as long): the server process is ended
          // instead, which rolls the transaction back and frees its locks (the inbox row the retry
          // waits for) at once, and the client is destroyed, so what the handler sends later fails.
          broken = error;
          ending = this.#endBackend(client, call.handler);
          throw error;
        }
        await client.query('ROLLBACK').catch((rollbackError: unknown) => {
          broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
        });
        throw error;
      }
      if (result === 'skipped') {
        await client.query('ROLLBACK');
        return result;
      }
      const committed = await client.query('COMMIT');
      // PostgreSQL answers COMMIT of a failed transaction with ROLLBACK, not an error.
      if (committed.command === 'ROLLBACK') {
        throw new HarrierError(
          'transaction-aborted',
          `The transaction of handler "${call.handler}" was rolled back at COMMIT: a statement in it failed and the error was caught. Let errors of postgresSession(ctx).query propagate (or use a SAVEPOINT)`,
        );
      }
      return result;
    } catch (error) {
      if (broken === undefined && isPostgresUnavailable(error) && error instanceof Error) broken = error;
      // The session was ended under the call: whatever the handler made of its failed statement, the
      // cause is the lost connection, reported as such.
      const cause = held.lost !== undefined && !isPostgresUnavailable(error) ? held.lost : error;
      throw postgresError(cause, this.#connection, `running handler "${call.handler}" in a transaction`);
    } finally {
      if (ending === undefined) held.release(broken);
      else {
        const reason = broken;
        void ending.then(() => {
          held.release(reason);
        });
      }
    }
  }

  /**
   * Ends the server process of a timed-out call's connection (`pg_terminate_backend`, from another
   * connection of the pool) while the client is still checked out, so it is surely that call's.
   * Never rejects: when it fails, destroying the client still ends the transaction, once the server
   * notices (after the statement running, if any).
   */
  #endBackend(client: pg.PoolClient, handler: string): Promise<void> {
    const pid = (client as { processID?: unknown }).processID;
    if (typeof pid !== 'number') return Promise.resolve();
    // The client hears of its own end as an error event, possibly after it is released: never unheard.
    client.on('error', () => undefined);
    return this.#handle.pool.query('SELECT pg_terminate_backend($1)', [pid]).then(
      () => undefined,
      (error: unknown) => {
        this.#logger.warn('Could not end the transaction of a timed-out handler; its connection is closed', {
          handler,
          error: toErrorInfo(error),
        });
      },
    );
  }

  /** Runs the call inside the open transaction; returns how it ended (the caller commits or rolls back). */
  async #inTransaction(client: pg.PoolClient, call: UnitOfWorkCall): Promise<UnitOfWorkResult> {
    const now = this.#clock.now();
    const { position } = call;
    if (call.handlerKind === 'projection' && position !== undefined) {
      const at = { projection: call.handler, topic: position.topic, partition: position.partition };
      // The generation row first (shared), as every checkpoint writer locks it: a rebuild waits for
      // this transaction, and this one refuses to commit over a rebuild that came first.
      if (position.generation !== undefined) {
        await holdGeneration(client, this.#tables, at.projection, position.generation);
      }
      // Serialises the lane across processes even before its checkpoint row exists.
      await client.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [
        `harrier-checkpoint:${JSON.stringify([this.schema, at.projection, at.topic, at.partition])}`,
      ]);
      const stored = await client.query<{ offset: string }>(
        `SELECT "offset" FROM ${this.#tables.checkpoints} WHERE projection = $1 AND topic = $2 AND partition = $3 FOR UPDATE`,
        [at.projection, at.topic, at.partition],
      );
      const offset = stored.rows[0]?.offset;
      if (offset !== undefined && Number(offset) >= position.offset) return 'skipped';
      await this.#runCall(client, call);
      await raiseCheckpoint(client, this.#tables, at, position.offset, now);
      return 'ran';
    }
    if (this.#inbox && takesInbox(call)) {
      // A concurrent duplicate blocks here on the row lock until the first commits, then skips.
      const inserted = await client.query(
        `INSERT INTO ${this.#tables.inbox} (subscription, message_id, handled_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
        [inboxSubscription(call), call.context.messageId, now],
      );
      if (inserted.rowCount === 0) return 'skipped';
    }
    await this.#runCall(client, call);
    if (!this.#outbox || call.handlerKind === 'projection') return 'ran';
    if (this.#handoff !== undefined) {
      const recorded = call.context.recorded.map((p) => p.outgoing);
      await this.#handoff.store(client, call.endpoint, recorded);
      return 'stored';
    }
    await writeOutboxRows(
      client,
      this.#tables,
      call.context.recorded.map((p) => p.outgoing),
      this.#clock.now(),
    );
    return 'stored';
  }

  /** Runs the handler with `client` as its session; refuses to commit an abandoned call. */
  async #runCall(client: pg.PoolClient, call: UnitOfWorkCall): Promise<void> {
    beginSession(call.context, client, this);
    try {
      await call.run();
    } finally {
      endSession(call.context);
    }
    if (call.abandoned()) {
      throw new HarrierError(
        'stopping',
        `Handler "${call.handler}" finished after its delivery was released by a stop: its transaction is rolled back and the message is redelivered`,
      );
    }
  }

  async prune(nowMs: number = this.#clock.now()): Promise<number> {
    this.#checkOpen();
    await this.ready();
    try {
      const result = await this.#handle.pool.query(
        `DELETE FROM ${this.#tables.inbox} WHERE handled_at < $1`,
        [nowMs - this.#retentionMs],
      );
      return result.rowCount ?? 0;
    } catch (error) {
      throw postgresError(error, this.#connection, 'pruning the inbox');
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#cancelPrune?.();
    this.#cancelPrune = undefined;
    await this.#handle.end();
  }

  #schedulePrune(): void {
    if (this.#pruneEveryMs <= 0 || !this.#inbox || this.#closed || this.#cancelPrune !== undefined) return;
    this.#cancelPrune = this.#clock.setTimer(this.#pruneEveryMs, () => {
      void this.prune()
        .catch((error: unknown) => {
          if (this.#closed) return;
          this.#logger.error('Pruning the inbox failed; will try again', {
            schema: this.schema,
            error: toErrorInfo(error),
          });
        })
        .finally(() => {
          this.#cancelPrune = undefined;
          this.#schedulePrune();
        });
    });
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        `postgresUnitOfWork (schema "${this.schema}") was closed: close it after the bus stops, or make a new one`,
      );
    }
  }
}

/**
 * A {@link TransactionalUnitOfWork} on PostgreSQL (`BusOptions.unitOfWork`): each command handler,
 * event handler and projection call runs in a transaction of the application's database, with the
 * inbox row that proves it ran, the outbox rows of what it recorded, and a projection's checkpoint;
 * so does each saga step when the bus's saga store is a `PostgresSagaStore` on the same database and
 * schema, with its instance.
 *
 * @remarks
 * Per call (kinds in `kinds` only):
 * - a command or event delivery: BEGIN; with the inbox, insert (subscription, message id), and when
 *   the row is there already, roll back and answer `skipped` (the delivery is acked, the handler not
 *   run); run the handler, which reaches the transaction through {@link postgresSession}; with the
 *   outbox, insert what it recorded into the outbox, or with `broker` into the broker's queue;
 *   COMMIT (`stored` with the outbox or the broker, else `ran`);
 * - a projection call fed by the event log: BEGIN; hold the projection's generation row (shared) and
 *   roll back with `projection-rebuilt` when it is not the lane's generation or a rebuild is under
 *   way; lock the checkpoint of (projection, topic, partition); when it is at or past the event's
 *   offset, roll back and answer `skipped`; run; raise the checkpoint to the offset; COMMIT (`ran`).
 *   A projection call without a position (fed by the broker on a bus without an event log, or
 *   replaying a dead letter) takes an inbox row as an event handler does, without the checkpoint;
 * - a saga step (with a `PostgresSagaStore` that joined the unit at the bus's start): as a command
 *   delivery, the step reading its instance (locked until COMMIT) and saving it in the transaction;
 *   a step that loses a compare-and-set rolls back and re-runs in a new transaction;
 * - `execute`: as a delivery, without the inbox.
 *
 * Any error rolls back and is rethrown, so the pipeline retries or dead-letters as usual; a call
 * whose delivery a stop released is rolled back too. A call past its time-out (HarrierError
 * `handler-timeout`) never commits: its server process is ended at once (`pg_terminate_backend`
 * from another connection of the pool) and its client destroyed, which rolls the transaction back
 * and frees its locks, even while the handler still runs a statement on it. The schema is checked on the first call
 * (`schema-outdated` naming the migrate command); nothing is migrated.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const unitOfWork = postgresUnitOfWork({ connection: pool });
 * const bus = createBus({ endpoint: 'orders', broker, unitOfWork, handlers: [PlaceOrderHandler] });
 * await bus.start();
 * // ... on shutdown:
 * await bus.stop();
 * await unitOfWork.close();
 * ```
 * @throws HarrierError `invalid-option` for a bad schema name, retention, prune interval or kind.
 */
export function postgresUnitOfWork(options: PostgresUnitOfWorkOptions): PostgresUnitOfWork {
  return new PostgresUnit(options);
}
