import { inject } from 'vitest';
import { PostgresBroker } from '../../src/postgres/broker/postgres-broker.js';
import { brokerChannel } from '../../src/postgres/broker/broker-channel.js';
import { parseDeliveryId } from '../../src/postgres/broker/queue-row.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { postgresTables } from '../../src/postgres/postgres-schema.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

describeMessageBrokerConformance('PostgresBroker', async () => {
  const schema = freshSchema();
  await migratePostgres(pool, { schema });
  // A short poll, so a row made due without a NOTIFY (an abandoned lease) is taken within a few ms.
  const options = { connection: databaseUrl, schema, pollIntervalMs: 100 } as const;
  const broker = new PostgresBroker(options);
  const tables = postgresTables(schema);
  return {
    broker,
    // A second process on the same database and schema.
    sibling: () => Promise.resolve(new PostgresBroker(options)),
    cleanup: async () => {
      await broker.close();
      await dropSchema(pool, schema);
    },
    // The lease run out and the row taken from its holder, as if its process died: the row is due
    // now and its token is no longer the holder's, so the holder can neither settle nor renew it.
    abandon: async (delivery) => {
      const id = parseDeliveryId(delivery.id);
      if (id === undefined) throw new Error(`not a PostgresBroker delivery id: ${delivery.id}`);
      await pool.query(
        `UPDATE ${tables.queue} SET delivery = gen_random_uuid(), lease_until = 0, run_at = 0 WHERE seq = $1`,
        [id.seq],
      );
      await pool.query(`SELECT pg_notify($1, '')`, [brokerChannel(tables)]);
    },
  };
});
