import { afterAll, beforeAll, inject } from 'vitest';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresScheduleStore } from '../../src/postgres/postgres-schedule-store.js';
import { describeScheduleStoreConformance } from '../../src/testing/schedule-store-conformance.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
// One migrated schema for the file: the suite gives every test names of its own.
const schema = freshSchema();

beforeAll(async () => {
  await migratePostgres(pool, { schema });
});

afterAll(async () => {
  await dropSchema(pool, schema);
});

describeScheduleStoreConformance('PostgresScheduleStore (from a URL)', () =>
  Promise.resolve({ store: new PostgresScheduleStore({ connection: databaseUrl, schema }) }),
);

// A store that ended a pool it was given would fail every later test.
describeScheduleStoreConformance('PostgresScheduleStore (given a pool)', () =>
  Promise.resolve({ store: new PostgresScheduleStore({ connection: pool, schema }) }),
);
