/**
 * The orders example on PostgreSQL alone, no Redis: the story of `npm start` (see main.ts), with
 * - the messages in PostgresBroker's queue tables;
 * - every command and event handler and the OrderSummary projection run in `postgresUnitOfWork`
 *   with the hand-off (`broker`): the handler's writes, its inbox row and the queue rows of what it
 *   sends or publishes commit in one transaction, so no outbox and no relay;
 * - the projection fed by the broker (no event log: the hand-off bypasses it), writing its read
 *   model to the `order_summaries` table (postgres-read-model.ts) in that transaction, its inbox
 *   row making each event apply once;
 * - the fulfilment saga's instances in PostgresSagaStore, each step in the unit too (its instance,
 *   inbox row and the messages it sends commit together);
 * - the dead letters in PostgresDeadLetterStore, replayed through the broker.
 *
 * Run it with `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run example:postgres-only`.
 * ORDERS_EXAMPLE_SCHEMA names the schema the example owns (default `orders_pg_only`): each run drops
 * it, migrates it and creates its tables there, so a second run starts from scratch and prints the
 * same story; the rows stay after the run for a look with psql.
 *
 * It refuses (exit code 2) a schema that exists without its `order_summaries` table: that schema is
 * not the example's to drop.
 *
 * Exit codes: 0 done, 1 the example failed, 2 PostgreSQL cannot be reached or the schema is not the
 * example's.
 */
import pg from 'pg';
import { silentLogger } from '../../src/index.js';
import {
  PostgresBroker,
  PostgresDeadLetterStore,
  PostgresSagaStore,
  describePostgresUrl,
  migratePostgres,
  postgresUnitOfWork,
} from '../../src/postgres/index.js';
import { BusActivity } from './activity.js';
import { createOrdersBus } from './app.js';
import { PlaceOrder } from './messages.js';
import { ordersTablesSql, postgresReadModel } from './postgres-read-model.js';
import { SimulatedLegacyCrm } from './services.js';
import { placeSampleOrders, printFailuresAhead, printReport, storyBusOptions } from './story.js';

const TIMEOUT_MS = 15_000;
const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

const print = (line = ''): void => void process.stdout.write(`${line}\n`);
const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

const url = process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL;
const schema = process.env.ORDERS_EXAMPLE_SCHEMA ?? 'orders_pg_only';
if (!/^[a-z_][a-z0-9_]*$/.test(schema)) {
  process.stderr.write(
    `ORDERS_EXAMPLE_SCHEMA is "${schema}": use a plain lower-case name (letters, digits, _), e.g. orders_pg_only\n`,
  );
  process.exit(2);
}

const pool = new pg.Pool({ connectionString: url, max: 20 });
pool.on('error', () => {});
try {
  await pool.query('SELECT 1');
} catch (error) {
  process.stderr.write(
    `Cannot connect to PostgreSQL at ${describePostgresUrl(url)} (${messageOf(error)}).\n` +
      `Set DATABASE_URL to a server you can use, e.g. DATABASE_URL=${DEFAULT_DATABASE_URL} npm run example:postgres-only\n` +
      '(docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16 starts one).\n',
  );
  await pool.end();
  process.exit(2);
}

// The schema is the example's own: start from scratch, then migrate it and add the app's tables.
// A schema that exists without the example's table belongs to someone else: refuse to drop it.
const { rows: found } = await pool.query<{ schema: boolean; ours: boolean }>(
  `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS schema,
          to_regclass(format('%I.order_summaries', $1::text)) IS NOT NULL AS ours`,
  [schema],
);
if (found[0]?.schema === true && !found[0].ours) {
  process.stderr.write(
    `Schema "${schema}" exists and is not the example's (no order_summaries table); the example drops its schema on every run, so it will not touch this one. Set ORDERS_EXAMPLE_SCHEMA to another name.\n`,
  );
  await pool.end();
  process.exit(2);
}
await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
await migratePostgres(pool, { schema });
await pool.query(ordersTablesSql(schema));

const crm = new SimulatedLegacyCrm({ available: false });
const activity = new BusActivity(print);
// One pool for the broker, the unit and the stores: the hand-off needs the broker's database.
const broker = new PostgresBroker({ connection: pool, schema, logger: silentLogger });
const unitOfWork = postgresUnitOfWork({ connection: pool, schema, broker, logger: silentLogger });
const sagaStore = new PostgresSagaStore({ connection: pool, schema });
const deadLetters = new PostgresDeadLetterStore({ connection: pool, schema });
const bus = createOrdersBus({
  ...storyBusOptions(activity, crm, sagaStore),
  broker,
  deadLetters,
  readModel: postgresReadModel(pool, schema),
  storage: { unitOfWork },
});

print(`Harrier orders example: endpoint "${bus.endpoint}" on PostgreSQL alone (PostgresBroker, no Redis)`);
print(`PostgreSQL: ${describePostgresUrl(url)}, schema "${schema}" (dropped and migrated for this run)`);
printFailuresAhead(print);

try {
  await unitOfWork.ready();
  await bus.start();

  print('Timeline (ms since start):');
  // The schema refuses a bad order on send, before anything reaches the queue.
  await placeSampleOrders(
    activity,
    {
      verb: 'bus.send',
      placed: 'sent',
      refused: 'nothing was sent',
      place: (order) => bus.send(PlaceOrder, order),
    },
    TIMEOUT_MS,
  );
  await printReport(
    bus,
    { print, activity, crm, sagaStore, timeoutMs: TIMEOUT_MS },
    {
      summaries: `bus.execute(ListOrderSummaries), from "${schema}".order_summaries`,
      sagas: `"${schema}".sagas`,
    },
  );

  const count = async (table: string): Promise<string> => {
    const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".${table}`);
    return rows[0]?.n ?? '0';
  };
  const { handled, retrying, deadLettered } = activity.counts;
  print();
  print(
    `Done: ${handled} handled, ${retrying} retries, ${deadLettered} dead-lettered; ${await count('inbox')} inbox rows, ${await count('outbox')} outbox rows (no relay runs). Stopping the bus.`,
  );
} catch (error) {
  print(`The example failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
} finally {
  // Closes the broker, the saga store and the dead-letter store too (on the shared pool, left open).
  await bus.stop({ gracePeriodMs: 2_000 });
  await unitOfWork.close();
  await pool.end();
}
