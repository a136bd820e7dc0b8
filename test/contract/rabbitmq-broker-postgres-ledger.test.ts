/** The broker conformance suite on RabbitMqBroker with a PostgresDeliveryLedger. */
import { afterAll, beforeAll, inject } from 'vitest';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresDeliveryLedger } from '../../src/postgres/postgres-delivery-ledger.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { rabbitBrokersUnderTest } from '../helpers/rabbitmq-conformance.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';

const { pool } = useSharedPostgres(inject('databaseUrl'));
// One migrated schema for the file: every test has message ids and queues of its own.
const schema = freshSchema();
const underTest = rabbitBrokersUnderTest();

// The global setup's server may still be booting.
beforeAll(async () => {
  await rabbitmqUrl();
  await migratePostgres(pool, { schema });
}, 60_000);

afterAll(async () => {
  await dropSchema(pool, schema);
});

describeMessageBrokerConformance('RabbitMqBroker with a PostgresDeliveryLedger', () =>
  underTest(new PostgresDeliveryLedger({ connection: pool, schema }), () => Promise.resolve()),
);
