import pg from 'pg';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { ManualClock } from '../../src/clock/manual-clock.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresSagaStore, type PostgresSagaStoreOptions } from '../../src/postgres/postgres-saga-store.js';
import type { SagaWrite } from '../../src/sagas/saga-store.js';
import { expectCode, failureOf } from '../../src/testing/expect-code.js';
import {
  describeSagaStoreConformance,
  type SagaStoreFactory,
} from '../../src/testing/saga-store-conformance.js';
import { freePort } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

/** One schema for the file, migrated once: the suite gives every test saga names of its own. */
const schema = freshSchema();
let migrated: Promise<unknown> | undefined;
const migrateOnce = (): Promise<unknown> => (migrated ??= migratePostgres(pool, { schema }));

afterAll(async () => {
  await dropSchema(pool, schema);
});

/** The suite's factory for stores on `connection`, in the file's schema. */
const storesOn =
  (connection: PostgresSagaStoreOptions['connection']): SagaStoreFactory =>
  async ({ completedRetentionMs, clock }) => {
    await migrateOnce();
    const options = { connection, schema, clock };
    return {
      store: new PostgresSagaStore(
        completedRetentionMs === undefined ? options : { ...options, completedRetentionMs },
      ),
    };
  };

describeSagaStoreConformance('PostgresSagaStore (from a URL)', storesOn(databaseUrl));
// Run on the shared pool too: a store that ended a pool it was given would fail every later test.
describeSagaStoreConformance('PostgresSagaStore (given a pool)', storesOn(pool));

const T0 = Date.UTC(2026, 0, 1);
const DAY = 24 * 60 * 60 * 1000;

function write(id: string, fields: Partial<SagaWrite> = {}): SagaWrite {
  return { saga: 'fulfilment', id, state: { n: 1 }, status: 'active', timeouts: [], now: T0, ...fields };
}

describe(PostgresSagaStore, () => {
  let own = freshSchema();
  const stores: PostgresSagaStore[] = [];
  const pools: pg.Pool[] = [];

  /** A store on this test's schema (migrated unless `migrate` is false). */
  async function open(
    options: Partial<PostgresSagaStoreOptions> = {},
    migrate = true,
  ): Promise<PostgresSagaStore> {
    if (migrate) await migratePostgres(pool, { schema: own });
    const store = new PostgresSagaStore({ connection: pool, schema: own, ...options });
    stores.push(store);
    return store;
  }

  function newPool(): pg.Pool {
    const created = new pg.Pool({ connectionString: databaseUrl, max: 4 });
    created.on('error', () => {});
    pools.push(created);
    return created;
  }

  const rowCount = async (): Promise<number> =>
    Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${own}".sagas`)).rows[0]?.n);

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
    for (const p of pools.splice(0)) await p.end();
    await dropSchema(pool, own);
    own = freshSchema();
  });

  describe('.save', () => {
    describe('when two processes save the same version at once', () => {
      it('lets exactly one win across two pools, every time', async () => {
        await migratePostgres(pool, { schema: own });
        const first = await open({ connection: newPool() }, false);
        const second = await open({ connection: newPool() }, false);
        for (let round = 0; round < 25; round++) {
          const id = `o-${round}`;
          const creates = await Promise.allSettled([
            first.save(write(id, { state: { by: 1 } }), 0),
            second.save(write(id, { state: { by: 2 } }), 0),
          ]);
          expect(creates.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
          const updates = await Promise.allSettled([
            first.save(write(id, { state: { by: 1, round } }), 1),
            second.save(write(id, { state: { by: 2, round } }), 1),
          ]);
          const won = updates.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
          const lost = updates.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
          expect(won).toHaveLength(1);
          expectCode(lost[0], 'saga-conflict');
          expect(lost[0]).toMatchObject({ expectedVersion: 1, actualVersion: 2 });
          expect(await first.get('fulfilment', id)).toEqual(won[0]);
        }
      });
    });

    describe('when the state holds text jsonb would change', () => {
      it('returns it as written: an escaped NUL, and keys in their order', async () => {
        const store = await open();
        const state = { z: 1, a: 'nul \u0000 here', m: { y: 2, b: 3 } };
        await store.save(write('o-1', { state }), 0);
        const loaded = await store.get('fulfilment', 'o-1');
        expect(loaded?.state).toEqual(state);
        expect(JSON.stringify(loaded?.state)).toBe(JSON.stringify(state));
      });
    });

    describe('when the saga name or id holds a NUL character', () => {
      it('rejects with invalid-argument, and reads find nothing', async () => {
        const store = await open();
        expectCode(await failureOf(() => store.save(write('o\u00001'), 0)), 'invalid-argument');
        expect(await store.get('fulfilment', 'o\u00001')).toBeUndefined();
        expect(await store.remove('fulfilment\u0000', 'o-1')).toBe(false);
        expect(await store.list({ saga: 'fulfilment\u0000' })).toEqual({ instances: [] });
      });
    });

    describe('when the instance completes', () => {
      it('stamps expires_at from the store clock plus completedRetentionMs, and an active save clears it', async () => {
        const clock = new ManualClock(T0 + 5 * DAY);
        const store = await open({ completedRetentionMs: 2 * DAY, clock });
        await store.save(write('o-1'), 0);
        await store.save(write('o-1', { status: 'completed' }), 1);
        const expiresAt = async (): Promise<string | null | undefined> =>
          (await pool.query<{ expires_at: string | null }>(`SELECT expires_at FROM "${own}".sagas`)).rows[0]
            ?.expires_at;
        expect(await expiresAt()).toBe(String(T0 + 7 * DAY));
        await store.save(write('o-1'), 2);
        expect(await expiresAt()).toBeNull();
      });
    });

    describe('when completed instances expired', () => {
      it('deletes them in a sweep during a later save, at most once a minute', async () => {
        const clock = new ManualClock(T0);
        const store = await open({ completedRetentionMs: 1000, clock });
        for (const id of ['a', 'b', 'c']) await store.save(write(id, { status: 'completed' }), 0);
        clock.advance(1000);
        await store.save(write('d'), 0);
        // The first save swept before a.. c expired; the next sweep is due a minute later.
        expect(await rowCount()).toBe(4);
        clock.advance(60_000);
        await store.save(write('e'), 0);
        expect(await rowCount()).toBe(2);
      });
    });
  });

  describe('.prune', () => {
    it('deletes every expired instance, over several batches, and keeps the others', async () => {
      const clock = new ManualClock(T0);
      const store = await open({ completedRetentionMs: 1000, clock });
      await pool.query(
        `INSERT INTO "${own}".sagas (saga, id, version, status, state, applied, timeouts, started_at, updated_at, completed_at, expires_at)
         SELECT 'fulfilment', 'x-' || n, 1, 'completed', '{}', '[]', '[]', $1, $1, $1, $2 FROM generate_series(1, 1200) AS n`,
        [T0, T0 + 1000],
      );
      clock.advance(600);
      await store.save(write('active'), 0);
      await store.save(write('kept', { status: 'completed' }), 0);
      clock.advance(400);
      expect(await store.prune()).toBe(1200);
      expect(await rowCount()).toBe(2);
      expect(await store.prune()).toBe(0);
    });
  });

  describe('.list', () => {
    it('orders ids by UTF-8 bytes, not by the database collation', async () => {
      const store = await open();
      // The tests' own server is initdb --locale=C: check the columns carry C whatever the database's.
      const collations = await pool.query<{ collation_name: string | null }>(
        `SELECT collation_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'sagas' AND column_name IN ('saga', 'id')`,
        [own],
      );
      expect(collations.rows.map((r) => r.collation_name)).toEqual(['C', 'C']);
      const ids = ['b', 'B', 'a', 'é', 'Z', '_', 'ä', '😀', 'ﬀ'];
      for (const id of ids) await store.save(write(id), 0);
      const listed = (await store.list({ saga: 'fulfilment' })).instances.map((i) => i.id);
      expect(listed).toEqual(
        [...ids].sort((x, y) => Buffer.compare(Buffer.from(x, 'utf8'), Buffer.from(y, 'utf8'))),
      );
    });
  });

  describe('at first use', () => {
    it('rejects with schema-outdated naming the migrate command, then works once the schema is migrated', async () => {
      const store = await open({}, false);
      const error = await failureOf(() => store.get('fulfilment', 'o-1'));
      expectCode(error, 'schema-outdated');
      expect((error as Error).message).toContain(`harrier postgres migrate --schema ${own}`);
      await migratePostgres(pool, { schema: own });
      expect(await store.get('fulfilment', 'o-1')).toBeUndefined();
    });
  });

  describe('when PostgreSQL cannot be reached', () => {
    it('rejects with postgres-unavailable, without the password', async () => {
      const port = await freePort();
      const store = new PostgresSagaStore({ connection: `postgres://app:s3cret@127.0.0.1:${port}/app` });
      stores.push(store);
      const error = await failureOf(() => store.get('fulfilment', 'o-1'));
      expectCode(error, 'postgres-unavailable');
      expect((error as Error).message).toContain(`127.0.0.1:${port}`);
      expect((error as Error).message).not.toContain('s3cret');
    });
  });

  describe('.close', () => {
    it('ends a pool it created and leaves a given pool open', async () => {
      await migratePostgres(pool, { schema: own });
      const given = newPool();
      const onGiven = await open({ connection: given }, false);
      await onGiven.get('fulfilment', 'o-1');
      await onGiven.close();
      expect((await given.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one).toBe(1);
      expect(given.ended).toBe(false);

      const application = `harrier-close-${own}`;
      const connections = async (): Promise<number> =>
        Number(
          (
            await pool.query<{ n: string }>(
              `SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1`,
              [application],
            )
          ).rows[0]?.n,
        );
      const owned = await open(
        { connection: { connectionString: databaseUrl, application_name: application } },
        false,
      );
      await owned.get('fulfilment', 'o-1');
      expect(await connections()).toBeGreaterThan(0);
      await owned.close();
      await expect.poll(connections).toBe(0);
    });
  });

  describe('options', () => {
    it('refuses a missing connection, a bad schema and a bad retention with invalid-option', () => {
      const bad = [
        {} as PostgresSagaStoreOptions,
        { connection: databaseUrl, schema: 'Bad-Name' },
        { connection: databaseUrl, completedRetentionMs: 0 },
      ];
      for (const options of bad) {
        let error: unknown;
        try {
          new PostgresSagaStore(options);
        } catch (caught) {
          error = caught;
        }
        expectCode(error, 'invalid-option');
      }
    });
  });
});
