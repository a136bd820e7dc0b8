import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresCheckpointStore } from '../../src/postgres/postgres-checkpoint-store.js';
import { describeCheckpointStoreConformance } from '../../src/testing/checkpoint-store-conformance.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
// One migrated schema for the file: the suite gives every test projection and topic names of its own.
const schema = freshSchema();

beforeAll(async () => {
  await migratePostgres(pool, { schema });
});

afterAll(async () => {
  await dropSchema(pool, schema);
});

describeCheckpointStoreConformance('PostgresCheckpointStore (from a URL)', () =>
  Promise.resolve({ store: new PostgresCheckpointStore({ connection: databaseUrl, schema }) }),
);

// Run against the shared pool too: a store that ended a pool it was given would fail every later test.
describeCheckpointStoreConformance('PostgresCheckpointStore (given a pool)', () =>
  Promise.resolve({ store: new PostgresCheckpointStore({ connection: pool, schema }) }),
);

describe(PostgresCheckpointStore, () => {
  const T0 = Date.UTC(2026, 0, 1);

  describe('.commit', () => {
    describe('when the store is closed', () => {
      it('rejects with HarrierError store-closed', async () => {
        const store = new PostgresCheckpointStore({ connection: pool, schema });
        await store.close();
        const error = await store.commit('totals', 'orders', 0, 1, T0).catch((e: unknown) => e);
        expect(HarrierError.is(error, 'store-closed')).toBe(true);
      });
    });

    describe('when the schema was never migrated', () => {
      it('rejects with HarrierError schema-outdated naming the migrate command', async () => {
        const store = new PostgresCheckpointStore({ connection: pool, schema: freshSchema() });
        const error = await store.commit('totals', 'orders', 0, 1, T0).catch((e: unknown) => e);
        await store.close();
        expect(HarrierError.is(error, 'schema-outdated')).toBe(true);
        expect((error as Error).message).toMatch(/harrier postgres migrate --schema t_/);
      });
    });

    describe('when PostgreSQL cannot be reached', () => {
      it('rejects with HarrierError postgres-unavailable', async () => {
        const store = new PostgresCheckpointStore({
          connection: {
            connectionString: 'postgres://postgres@127.0.0.1:1/postgres',
            connectionTimeoutMillis: 2_000,
          },
          schema,
        });
        const error = await store.get('totals', 'orders', 0).catch((e: unknown) => e);
        await store.close();
        expect(HarrierError.is(error, 'postgres-unavailable')).toBe(true);
      });
    });
  });

  describe('.list', () => {
    describe('when names hold quotes, "|" and ":"', () => {
      it('keeps topics, partitions and projections apart, in byte order', async () => {
        const store = new PostgresCheckpointStore({ connection: pool, schema });
        const p = `o'brien|${freshSchema()}`;
        await store.commit(`${p}:b`, 'a|1', 2, 5, T0);
        await store.commit(`${p}:B`, 'a', 12, 6, T0 + 1);
        expect(await store.list(`${p}:b`)).toEqual([
          { projection: `${p}:b`, topic: 'a|1', partition: 2, offset: 5, updatedAt: T0 },
        ]);
        const both = (await store.list()).filter((c) => c.projection.startsWith(p));
        expect(both.map((c) => c.projection)).toEqual([`${p}:B`, `${p}:b`]);
        await store.close();
      });
    });
  });
});
