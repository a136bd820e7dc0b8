import { deadLettersMigrationSql } from './dead-letters/dead-letters-migration.js';
import { deliveryLedgerAdmittedAtSql, deliveryLedgerMigrationSql } from './delivery-ledger-migration.js';
import type { PostgresTables } from './postgres-schema.js';

/** A table of Harrier's schema that a migration step creates. */
export type HarrierTableName =
  | 'outbox'
  | 'inbox'
  | 'checkpoints'
  | 'sagas'
  | 'queue'
  | 'routes'
  | 'dedupe'
  | 'dead_letters'
  | 'outbox_parked'
  | 'projection_generations'
  | 'schedules'
  | 'ledger_claims'
  | 'ledger_copies'
  | 'ledger_losses';

/** One step of Harrier's schema, applied once per schema in version order. */
export interface Migration {
  readonly version: number;
  readonly name: string;
  /** The tables the step creates: one that exists before the step is applied is not Harrier's. */
  readonly tables: readonly HarrierTableName[];
  /** The statements, for the tables of one schema. */
  sql(tables: PostgresTables): string;
}

/**
 * Every step of Harrier's PostgreSQL schema, oldest first. Never edit a released step: add one.
 *
 * @remarks
 * Times are `bigint` ms since the epoch (the clock Harrier's parts are given, a `ManualClock` in
 * tests), not `timestamptz` from the server's clock.
 */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'outbox, inbox, checkpoints, sagas',
    tables: ['outbox', 'inbox', 'checkpoints', 'sagas'],
    sql: (t) => `
      CREATE TABLE IF NOT EXISTS ${t.outbox} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        message_id text NOT NULL,
        kind text NOT NULL,
        type text NOT NULL,
        body text NOT NULL,
        partition_key text,
        ordered boolean NOT NULL DEFAULT false,
        lane integer NOT NULL,
        topic text,
        deliver_at bigint,
        require_route boolean,
        created_at bigint NOT NULL
      ) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);
      CREATE INDEX IF NOT EXISTS outbox_lane_seq ON ${t.outbox} (lane, seq);

      CREATE TABLE IF NOT EXISTS ${t.inbox} (
        subscription text NOT NULL,
        message_id text NOT NULL,
        handled_at bigint NOT NULL,
        PRIMARY KEY (subscription, message_id)
      );
      CREATE INDEX IF NOT EXISTS inbox_handled_at ON ${t.inbox} (handled_at);

      CREATE TABLE IF NOT EXISTS ${t.checkpoints} (
        projection text NOT NULL,
        topic text NOT NULL,
        partition integer NOT NULL,
        "offset" bigint NOT NULL,
        updated_at bigint NOT NULL,
        PRIMARY KEY (projection, topic, partition)
      );

      -- COLLATE "C": the key orders by UTF-8 bytes, as every saga store lists. json, not jsonb: the
      -- text JSON.stringify wrote, kept as is (jsonb would reorder keys and refuse an escaped NUL).
      CREATE TABLE IF NOT EXISTS ${t.sagas} (
        saga text COLLATE "C" NOT NULL,
        id text COLLATE "C" NOT NULL,
        version integer NOT NULL,
        status text NOT NULL CHECK (status IN ('active', 'completed')),
        state json NOT NULL,
        applied json NOT NULL,
        timeouts json NOT NULL,
        started_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        completed_at bigint,
        expires_at bigint,
        PRIMARY KEY (saga, id)
      );
      CREATE INDEX IF NOT EXISTS sagas_expires_at ON ${t.sagas} (expires_at) WHERE expires_at IS NOT NULL;
    `,
  },
  {
    version: 2,
    name: 'broker',
    tables: ['queue', 'routes', 'dedupe'],
    sql: (t) => `
      -- One row per message copy a subscription (or command queue) holds. run_at is when the row can
      -- next be taken: its due time while it waits, its lease's end while a receiver holds it
      -- (delivery set), so one index range finds every takeable row, expired leases included.
      -- body is bytea: bodies pass through byte-exact, NUL included, which text cannot hold.
      CREATE TABLE IF NOT EXISTS ${t.queue} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        lane text NOT NULL,
        endpoint text,
        handler text,
        message_id text NOT NULL,
        kind text NOT NULL,
        type text NOT NULL,
        body bytea NOT NULL,
        partition_key text,
        order_key text,
        run_at bigint NOT NULL,
        attempt integer NOT NULL DEFAULT 1,
        unsettled_ends integer NOT NULL DEFAULT 0,
        history json,
        pending_dead_letter json,
        replay_of text,
        delivery uuid,
        lease_until bigint,
        created_at bigint NOT NULL
      ) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);
      CREATE INDEX IF NOT EXISTS queue_take ON ${t.queue} (lane, run_at, seq);
      CREATE INDEX IF NOT EXISTS queue_order ON ${t.queue} (lane, order_key, seq) WHERE order_key IS NOT NULL;
      CREATE INDEX IF NOT EXISTS queue_message ON ${t.queue} (queue, message_id);

      -- A receiver's take (see takeRows). The planner setting is the function's: on a queue table
      -- without statistics (a fresh install, until autovacuum analyses it) PostgreSQL estimates a
      -- lane's waiting rows at a handful and plans a bitmap scan and a sort of every one of them
      -- (milliseconds per take at 20,000 rows) instead of reading the index in order up to the limit.
      CREATE OR REPLACE FUNCTION ${t.queueTake}(
          lanes text[], ordered_lane text, command_types text[], now bigint, take_limit integer, lease_until bigint)
        RETURNS SETOF ${t.queue} LANGUAGE sql VOLATILE SET enable_bitmapscan = off AS $take$
        WITH lanes AS (
          SELECT unnest(lanes) AS lane, NULL::text[] AS types
          UNION ALL SELECT ordered_lane, command_types),
        c AS (
          SELECT x.seq FROM lanes l CROSS JOIN LATERAL (
            SELECT q.seq, q.run_at FROM ${t.queue} q
             WHERE q.lane = l.lane AND q.run_at <= now AND (l.types IS NULL OR q.type = ANY(l.types))
               AND (q.order_key IS NULL OR NOT EXISTS (
                     SELECT 1 FROM ${t.queue} e WHERE e.lane = q.lane AND e.order_key = q.order_key AND e.seq < q.seq))
             ORDER BY q.run_at, q.seq
             LIMIT take_limit
             FOR UPDATE SKIP LOCKED) x
           ORDER BY x.run_at, x.seq
           LIMIT take_limit)
        UPDATE ${t.queue} q SET
           attempt = q.attempt + CASE WHEN q.delivery IS NULL THEN 0 ELSE 1 END,
           unsettled_ends = q.unsettled_ends + CASE WHEN q.delivery IS NULL THEN 0 ELSE 1 END,
           delivery = gen_random_uuid(), lease_until = queue_take.lease_until, run_at = queue_take.lease_until
          FROM c WHERE q.seq = c.seq
        RETURNING q.*
      $take$;

      CREATE TABLE IF NOT EXISTS ${t.routes} (
        endpoint text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('command', 'event')),
        handler text NOT NULL,
        type text NOT NULL,
        ordered boolean NOT NULL,
        registered_at bigint NOT NULL,
        PRIMARY KEY (endpoint, kind, handler, type)
      );
      CREATE INDEX IF NOT EXISTS routes_type ON ${t.routes} (type, kind);

      CREATE TABLE IF NOT EXISTS ${t.dedupe} (
        queue text NOT NULL,
        message_id text NOT NULL,
        expires_at bigint NOT NULL,
        PRIMARY KEY (queue, message_id)
      );
      CREATE INDEX IF NOT EXISTS dedupe_expires_at ON ${t.dedupe} (expires_at);
    `,
  },
  {
    version: 3,
    name: 'dead letters',
    tables: ['dead_letters'],
    sql: deadLettersMigrationSql,
  },
  {
    version: 4,
    name: 'parked outbox rows',
    tables: ['outbox_parked'],
    // The outbox's new columns count a row's failed tries across relay restarts; a constant default
    // makes ADD COLUMN a catalog change (no table rewrite) on PostgreSQL 11+.
    sql: (t) => `
      ALTER TABLE ${t.outbox}
        ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,
        ADD COLUMN IF NOT EXISTS first_failed_at bigint,
        ADD COLUMN IF NOT EXISTS last_failed_at bigint,
        ADD COLUMN IF NOT EXISTS last_error text;

      CREATE TABLE IF NOT EXISTS ${t.outboxParked} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        message_id text NOT NULL,
        kind text NOT NULL,
        type text NOT NULL,
        body text NOT NULL,
        partition_key text,
        ordered boolean NOT NULL,
        lane integer NOT NULL,
        topic text,
        deliver_at bigint,
        require_route boolean,
        created_at bigint NOT NULL,
        attempts integer NOT NULL,
        reason text NOT NULL CHECK (reason IN ('failed', 'malformed')),
        error_code text,
        error text NOT NULL,
        first_failed_at bigint NOT NULL,
        last_failed_at bigint NOT NULL,
        parked_at bigint NOT NULL
      );
      CREATE INDEX IF NOT EXISTS outbox_parked_message_id ON ${t.outboxParked} (message_id);
    `,
  },
  {
    version: 5,
    name: 'projection rebuild marker',
    tables: ['projection_generations'],
    // One row per projection ever rebuilt, reset or projected in a unit of work: its generation
    // (raised by every rebuild, checked by every conditional checkpoint commit) and the marker of a
    // rebuild under way (rebuild_id set from its start until its reset() succeeded).
    sql: (t) => `
      CREATE TABLE IF NOT EXISTS ${t.projectionGenerations} (
        projection text COLLATE "C" PRIMARY KEY,
        generation bigint NOT NULL DEFAULT 0,
        rebuild_id text,
        rebuild_started_at bigint,
        CHECK ((rebuild_id IS NULL) = (rebuild_started_at IS NULL))
      );
    `,
  },
  {
    version: 6,
    name: 'recurring schedules',
    tables: ['schedules'],
    // One row per schedule of `bus.every`: what it sends and when (`definition`, JSON text: kept as written, so a payload compares equal), and the last
    // tick any process sent, raised only upwards (PostgresScheduleStore.recordTick).
    sql: (t) => `
      CREATE TABLE IF NOT EXISTS ${t.schedules} (
        name text COLLATE "C" PRIMARY KEY,
        definition text NOT NULL,
        last_tick_at bigint,
        next_run_at bigint,
        updated_at bigint NOT NULL
      );
    `,
  },
  {
    version: 7,
    name: 'saga state version',
    tables: [],
    // The version of the saga's state shape each row's state was saved with; rows saved before it
    // existed hold version 1. A constant default makes ADD COLUMN a catalog change (no table rewrite).
    sql: (t) => `
      ALTER TABLE ${t.sagas} ADD COLUMN IF NOT EXISTS state_version integer NOT NULL DEFAULT 1;
    `,
  },
  {
    version: 8,
    name: 'schedule tick outcome',
    tables: [],
    // The outcome of a schedule's last tick: the id of the message it sent, and the failure (JSON
    // text: message and time) of a later tick's send, cleared when a tick is recorded. Nullable
    // columns without a default: ADD COLUMN is a catalog change, no table rewrite.
    sql: (t) => `
      ALTER TABLE ${t.schedules}
        ADD COLUMN IF NOT EXISTS last_message_id text,
        ADD COLUMN IF NOT EXISTS last_error text;
    `,
  },
  {
    version: 9,
    name: 'delivery ledger',
    tables: ['ledger_claims', 'ledger_copies'],
    sql: deliveryLedgerMigrationSql,
  },
  {
    version: 10,
    name: 'delivery ledger outage losses',
    tables: ['ledger_losses'],
    // The latest loss of each queue's copy of a message in an outage (PostgresDeliveryLedger.lost):
    // the token it was recorded for, the copy's x-delivery-count and excused ends then, and when;
    // and when each claim was last admitted (a loss dropped before that is not recorded).
    sql: (t) => `
      CREATE TABLE IF NOT EXISTS ${t.ledgerLosses} (
        message_id text NOT NULL,
        queue text NOT NULL,
        token text NOT NULL,
        delivery_count integer NOT NULL,
        excused_ends integer NOT NULL,
        lost_at bigint NOT NULL,
        expires_at bigint NOT NULL,
        PRIMARY KEY (message_id, queue)
      );
      CREATE INDEX IF NOT EXISTS ledger_losses_expires_at ON ${t.ledgerLosses} (expires_at);
      ${deliveryLedgerAdmittedAtSql(t)}
    `,
  },
];

/** The version a schema must be at for this copy of Harrier. */
export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]?.version ?? 0;
