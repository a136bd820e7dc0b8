import { afterAll, beforeAll, inject } from 'vitest';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresDeliveryLedger } from '../../src/postgres/postgres-delivery-ledger.js';
import { describeDeliveryLedgerConformance } from '../../src/testing/delivery-ledger-conformance.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
// One migrated schema for the file: the suite gives every test message ids and queues of its own.
const schema = freshSchema();

beforeAll(async () => {
  await migratePostgres(pool, { schema });
});

afterAll(async () => {
  await dropSchema(pool, schema);
});

describeDeliveryLedgerConformance('PostgresDeliveryLedger (from a URL)', (options) =>
  Promise.resolve({ ledger: new PostgresDeliveryLedger({ ...options, connection: databaseUrl, schema }) }),
);

// A ledger that ended a pool it was given would fail every later test.
describeDeliveryLedgerConformance('PostgresDeliveryLedger (given a pool)', (options) =>
  Promise.resolve({ ledger: new PostgresDeliveryLedger({ ...options, connection: pool, schema }) }),
);
