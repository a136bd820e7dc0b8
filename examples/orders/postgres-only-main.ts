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
import { silentLogger } from '../../src/index.js';
import {
  PostgresBroker,
  PostgresDeadLetterStore,
  PostgresSagaStore,
  describePostgresUrl,
  postgresUnitOfWork,
} from '../../src/postgres/index.js';
import { BusActivity } from './activity.js';
import { createOrdersBus } from './app.js';
import { PlaceOrder } from './messages.js';
import { postgresReadModel } from './postgres-read-model.js';
import { openExampleDatabase } from './postgres-setup.js';
import { SimulatedLegacyCrm } from './services.js';
import { placeSampleOrders, printFailuresAhead, printReport, storyBusOptions } from './story.js';

const TIMEOUT_MS = 15_000;

const print = (line = ''): void => void process.stdout.write(`${line}\n`);

const { pool, schema, url } = await openExampleDatabase({
  script: 'example:postgres-only',
  defaultSchema: 'orders_pg_only',
  maxConnections: 20,
});

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
