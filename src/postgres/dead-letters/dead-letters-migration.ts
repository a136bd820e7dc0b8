import type { PostgresTables } from '../postgres-schema.js';

/** The comment the migration leaves on the table when it could not create the trigram index. */
export const NO_TRIGRAM_COMMENT = 'harrier: text search without a trigram index';

/**
 * Step 3 of Harrier's schema: the dead-letter table of `PostgresDeadLetterStore` and its indexes.
 *
 * @remarks
 * `seq` is the first-insertion order lists follow (an update keeps its row, so its place); `touched`
 * comes from a sequence on every add, so a failure group's sample is the record written last. The
 * record itself is `record` (JSON text as written, so an escaped NUL survives) plus `envelope`
 * (bytea: the UTF-8 bytes of the body, NUL characters included). The filter columns are copies for
 * indexes, with NUL replaced (text cannot hold it); `search` is the lower-cased error message, stack
 * and envelope that text search matches with LIKE.
 *
 * pg_trgm makes that search use an index. `CREATE EXTENSION` needs the CREATE privilege on the
 * database (pg_trgm is a trusted extension since PostgreSQL 13): the step tries it in a
 * subtransaction (a PL/pgSQL exception block) and, when it fails, creates no trigram index, leaves
 * {@link NO_TRIGRAM_COMMENT} and the reason as the table's comment, and search scans the table.
 */
export function deadLettersMigrationSql(t: PostgresTables): string {
  const schema = t.schema;
  return `
    CREATE SEQUENCE IF NOT EXISTS ${t.deadLetterWrites};
    CREATE TABLE IF NOT EXISTS ${t.deadLetters} (
      seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      id text COLLATE "C" NOT NULL UNIQUE,
      touched bigint NOT NULL,
      version integer NOT NULL DEFAULT 1,
      status text NOT NULL CHECK (status IN ('dead', 'replayed')),
      endpoint text NOT NULL,
      type text,
      handler text,
      reason text NOT NULL,
      fingerprint text COLLATE "C" NOT NULL,
      first_failed_at bigint NOT NULL,
      last_failed_at bigint NOT NULL,
      record json NOT NULL,
      envelope bytea NOT NULL,
      replays json NOT NULL DEFAULT '[]',
      search text NOT NULL,
      stored_at bigint NOT NULL,
      updated_at bigint NOT NULL
    );
    -- Lists of one status in insertion order; counts of one status from the index alone.
    CREATE INDEX IF NOT EXISTS dead_letters_status_seq ON ${t.deadLetters} (status, seq);
    -- Failure groups: one ordered pass over a status, aggregated from the index alone.
    CREATE INDEX IF NOT EXISTS dead_letters_groups ON ${t.deadLetters}
      (status, fingerprint, last_failed_at, first_failed_at, touched);
    -- A group's sample: the row of its latest write.
    CREATE INDEX IF NOT EXISTS dead_letters_touched ON ${t.deadLetters} (touched);
    CREATE INDEX IF NOT EXISTS dead_letters_endpoint ON ${t.deadLetters} (endpoint, status, seq);
    CREATE INDEX IF NOT EXISTS dead_letters_type ON ${t.deadLetters} (type, status, seq);
    -- The filter fields are correlated (a type belongs to few endpoints): without these statistics a
    -- combination that matches nothing is estimated at thousands of rows, and a page walks the table.
    CREATE STATISTICS IF NOT EXISTS ${t.quotedSchema}.dead_letters_fields (mcv)
      ON status, endpoint, type, handler, reason FROM ${t.deadLetters};
    CREATE INDEX IF NOT EXISTS dead_letters_last_failed_at ON ${t.deadLetters} (last_failed_at);
    DO $harrier$
    DECLARE
      extension_schema text;
    BEGIN
      BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
        SELECT n.nspname INTO extension_schema FROM pg_extension e
          JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
        EXECUTE format(
          'CREATE INDEX IF NOT EXISTS dead_letters_search_trgm ON %I.dead_letters USING gin (search %I.gin_trgm_ops)',
          '${schema}', extension_schema);
      EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'harrier: no trigram index for dead-letter text search (%): searches scan the table', SQLERRM;
        EXECUTE format('COMMENT ON TABLE %I.dead_letters IS %L', '${schema}',
          '${NO_TRIGRAM_COMMENT} (pg_trgm: ' || SQLERRM || ')');
      END;
    END
    $harrier$;
  `;
}
