import pg from 'pg';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { buildDeadLetterRecord } from '../../src/dead-letters/dead-letter-record.js';
import type { DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { NO_TRIGRAM_COMMENT } from '../../src/postgres/dead-letters/dead-letters-migration.js';
import { expectCode, failureOf } from '../../src/testing/expect-code.js';
import { freePort } from '../helpers/local-redis.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import {
  PostgresDeadLetterStore,
  type PostgresDeadLetterStoreOptions,
} from '../../src/postgres/dead-letters/postgres-dead-letter-store.js';
import {
  describeDeadLetterStoreConformance,
  type DeadLetterStoreFactory,
} from '../../src/testing/dead-letter-store-conformance.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const schemas: string[] = [];

afterAll(async () => {
  for (const schema of schemas) await dropSchema(pool, schema);
});

/** The suite's factory: a store on `connection` in a schema of its own, migrated, dropped after the test. */
const storesOn =
  (connection: PostgresDeadLetterStoreOptions['connection']): DeadLetterStoreFactory =>
  async () => {
    const schema = freshSchema();
    schemas.push(schema);
    await migratePostgres(pool, { schema });
    return {
      store: new PostgresDeadLetterStore({ connection, schema }),
      cleanup: () => dropSchema(pool, schema),
    };
  };

describeDeadLetterStoreConformance('PostgresDeadLetterStore (from a URL)', storesOn(databaseUrl));
// Run on the shared pool too: a store that ended a pool it was given would fail every later test.
describeDeadLetterStoreConformance('PostgresDeadLetterStore (given a pool)', storesOn(pool));
// Text search without pg_trgm's index (a migration without the privilege to create the extension),
describeDeadLetterStoreConformance('PostgresDeadLetterStore (no trigram index)', async () => {
  const schema = freshSchema();
  schemas.push(schema);
  await migratePostgres(pool, { schema });
  await pool.query(`DROP INDEX IF EXISTS "${schema}".dead_letters_search_trgm`);
  return {
    store: new PostgresDeadLetterStore({ connection: pool, schema }),
    cleanup: () => dropSchema(pool, schema),
  };
});

const T0 = Date.UTC(2026, 0, 1);

/** A dead letter whose envelope is `body`, failing with `message`. */
function deadLetter(body: string, message = 'boom'): DeadLetterRecord {
  const messageId = uuidv7();
  return buildDeadLetterRecord({
    body,
    facts: {
      messageId,
      kind: 'event',
      type: 'orders.OrderPlaced',
      endpoint: 'billing',
      handler: 'Invoice',
      attempt: 1,
      history: [],
      partitionKey: undefined,
    },
    handler: 'Invoice',
    reason: 'handler-failed',
    error: {
      name: 'Error',
      message,
      stack: `Error: ${message}\n    at Invoice.handle (/app/invoice.ts:1:1)`,
    },
    ordered: false,
    now: T0,
  });
}

describe(PostgresDeadLetterStore, () => {
  const stores: PostgresDeadLetterStore[] = [];

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
  });

  async function open(
    options: Partial<PostgresDeadLetterStoreOptions> = {},
  ): Promise<PostgresDeadLetterStore> {
    const schema = freshSchema();
    schemas.push(schema);
    await migratePostgres(pool, { schema });
    const store = new PostgresDeadLetterStore({ connection: pool, schema, ...options });
    stores.push(store);
    return store;
  }

  describe('.add', () => {
    describe('when the envelope holds NUL characters and text beyond ASCII', () => {
      it('keeps every character, and search finds text after a NUL', async () => {
        const store = await open();
        const body = `{"payload":"a\u0000b\u0000\u0000Ünïcødé 😀 needle-7"}\u0000`;
        const record = deadLetter(body, 'nul \u0000 in the error');
        expect(await store.add(record)).toEqual(record);
        expect((await store.get(record.id))?.envelope).toBe(body);
        expect((await store.get(record.id))?.error.message).toBe('nul \u0000 in the error');
        expect((await store.list({ text: 'NEEDLE-7' })).records.map((r) => r.id)).toEqual([record.id]);
        expect(await store.count({ text: 'b\u0000\u0000ü' })).toBe(1);
      });
    });
  });

  describe('.textSearchIndexed', () => {
    it('is true when the migration could create pg_trgm', async () => {
      const store = await open();
      expect(await store.textSearchIndexed()).toBe(true);
    });
  });

  describe('when the migration could not create pg_trgm', () => {
    const database = `harrier_${freshSchema()}`;
    const url = new URL(databaseUrl);
    url.pathname = `/${database}`;

    afterAll(async () => {
      await pool.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    });

    it('records why, creates no trigram index, and search still finds every match, a span per page', async () => {
      await pool.query(`CREATE DATABASE "${database}"`);
      // No schema to create the extension in: CREATE EXTENSION fails, as without the privilege.
      const connection = { connectionString: url.toString(), options: '-c search_path=nowhere' };
      await migratePostgres(connection, { schema: 'harrier' });
      const other = new pg.Client({ connectionString: url.toString() });
      await other.connect();
      try {
        const comment = await other.query<{ comment: string | null }>(
          `SELECT obj_description('harrier.dead_letters'::regclass, 'pg_class') AS comment`,
        );
        expect(comment.rows[0]?.comment).toContain(NO_TRIGRAM_COMMENT);
      } finally {
        await other.end();
      }
      const store = new PostgresDeadLetterStore({ connection: url.toString(), textScanBudget: 3 });
      stores.push(store);
      expect(await store.textSearchIndexed()).toBe(false);
      const matching: string[] = [];
      for (let i = 0; i < 12; i++) {
        const record = deadLetter('{}', i % 4 === 0 ? `Needle ${i}` : 'hay');
        await store.add(record);
        if (i % 4 === 0) matching.push(record.id);
      }
      const found: string[] = [];
      const sizes: number[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.list(
          { text: 'needle' },
          cursor === undefined ? { limit: 10 } : { limit: 10, cursor },
        );
        found.push(...page.records.map((r) => r.id));
        sizes.push(page.records.length);
        cursor = page.next;
      } while (cursor !== undefined);
      expect(found).toEqual(matching);
      // Each page read a span of 3 rows: 12 rows, 4 pages, one match in three of them.
      expect(sizes).toEqual([1, 1, 1, 0]);
      expect(await store.count({ text: 'NEEDLE' })).toBe(3);
    });
  });

  describe('at first use', () => {
    it('rejects with schema-outdated naming the migrate command', async () => {
      const schema = freshSchema();
      const store = new PostgresDeadLetterStore({ connection: pool, schema });
      stores.push(store);
      const error = await failureOf(() => store.get('x'));
      expectCode(error, 'schema-outdated');
      expect((error as Error).message).toContain(`harrier postgres migrate --schema ${schema}`);
    });
  });

  describe('when PostgreSQL cannot be reached', () => {
    it('rejects with postgres-unavailable, without the password', async () => {
      const port = await freePort();
      const store = new PostgresDeadLetterStore({
        connection: `postgres://app:s3cret@127.0.0.1:${port}/app`,
      });
      stores.push(store);
      const error = await failureOf(() => store.count());
      expectCode(error, 'postgres-unavailable');
      expect((error as Error).message).toContain(`127.0.0.1:${port}`);
      expect((error as Error).message).not.toContain('s3cret');
    });
  });

  describe('options', () => {
    it('refuses a missing connection, a bad schema and a bad text scan budget with invalid-option', () => {
      const bad = [
        {} as PostgresDeadLetterStoreOptions,
        { connection: databaseUrl, schema: 'Bad-Name' },
        { connection: databaseUrl, textScanBudget: 0 },
      ];
      for (const options of bad) {
        let error: unknown;
        try {
          new PostgresDeadLetterStore(options);
        } catch (caught) {
          error = caught;
        }
        expectCode(error, 'invalid-option');
      }
    });
  });
});
