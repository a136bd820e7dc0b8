import type { PostgresTables } from './postgres-schema.js';

/** A table of Harrier's schema that a migration step creates. */
export type HarrierTableName = 'outbox' | 'inbox' | 'checkpoints' | 'sagas' | 'projection_generations';

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
];

/** The version a schema must be at for this copy of Harrier. */
export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]?.version ?? 0;
