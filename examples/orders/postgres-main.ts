/**
 * The orders example with its state in PostgreSQL: the story of `npm start` (see main.ts), with
 * - the orders placed by "application code": each one an `orders` row and its PlaceOrder command,
 *   recorded through PostgresOutbox in the application's own transaction and published by the
 *   outbox relay once that transaction commits;
 * - every command and event handler and the OrderSummary projection run in `postgresUnitOfWork`
 *   (inbox, outbox, and for the projection its checkpoint, in the handler's transaction);
 * - the projection fed from an in-memory event log, writing its read model to the
 *   `order_summaries` table (postgres-read-model.ts), checkpoints in PostgresCheckpointStore, so
 *   the rows and the checkpoint of each event commit together;
 * - the fulfilment saga's instances in PostgresSagaStore on the unit's schema, so each saga step
 *   commits its state, its inbox row and its messages (outbox) in the unit's transaction.
 * The broker and the dead letters stay in memory.
 *
 * Run it with `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run example:postgres`.
 * ORDERS_EXAMPLE_SCHEMA names the schema the example owns (default `orders_example`): each run
 * drops it, migrates it and creates its tables there, so a second run starts from scratch and prints
 * the same story; the rows stay after the run for a look with psql.
 *
 * It refuses (exit code 2) a schema that exists without its `order_summaries` table: that schema is
 * not the example's to drop.
 *
 * Exit codes: 0 done, 1 the example failed, 2 PostgreSQL cannot be reached or the schema is not the
 * example's.
 */
import { InMemoryEventLog, silentLogger, type InputOf } from '../../src/index.js';
import {
  PostgresCheckpointStore,
  PostgresOutbox,
  PostgresSagaStore,
  describePostgresUrl,
  postgresUnitOfWork,
  startOutboxRelay,
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
  script: 'example:postgres',
  defaultSchema: 'orders_example',
  maxConnections: 12,
});

const crm = new SimulatedLegacyCrm({ available: false });
const activity = new BusActivity(print);
const sagaStore = new PostgresSagaStore({ connection: pool, schema });
const checkpoints = new PostgresCheckpointStore({ connection: pool, schema });
const unitOfWork = postgresUnitOfWork({ connection: pool, schema, logger: silentLogger });
const bus = createOrdersBus({
  ...storyBusOptions(activity, crm, sagaStore),
  readModel: postgresReadModel(pool, schema),
  storage: {
    eventLog: new InMemoryEventLog({ topics: [{ name: 'orders', partitions: 4 }] }),
    checkpoints,
    unitOfWork,
  },
});
const outbox = new PostgresOutbox(bus, { schema });

/** The application's "place order" use case: its row and its command commit together. */
async function placeOrder(order: InputOf<typeof PlaceOrder>): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`INSERT INTO "${schema}".orders (order_id, customer) VALUES ($1, $2)`, [
      order.orderId,
      order.customer,
    ]);
    await outbox.send(client, PlaceOrder, order);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

print(`Harrier orders example: endpoint "${bus.endpoint}" with its state in PostgreSQL`);
print(`PostgreSQL: ${describePostgresUrl(url)}, schema "${schema}" (dropped and migrated for this run)`);
printFailuresAhead(print);

let relay: Awaited<ReturnType<typeof startOutboxRelay>> | undefined;
try {
  await unitOfWork.ready();
  await bus.start();
  relay = await startOutboxRelay({
    connection: pool,
    publisher: bus.publisher,
    schema,
    logger: silentLogger,
  });

  print('Timeline (ms since start):');
  // The schema refuses a bad order inside the application's transaction, which rolls back.
  await placeSampleOrders(
    activity,
    {
      verb: 'outbox.send',
      placed: 'recorded',
      refused: 'rolled back, no orders row',
      place: placeOrder,
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

  const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".orders`);
  const { handled, retrying, deadLettered } = activity.counts;
  print();
  print(
    `Done: ${handled} handled, ${retrying} retries, ${deadLettered} dead-lettered; ${rows[0]?.n ?? 0} orders rows, relay published ${relay.stats().published}. Stopping the bus.`,
  );
} catch (error) {
  print(`The example failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
} finally {
  await relay?.stop();
  await bus.stop({ gracePeriodMs: 2_000 });
  await unitOfWork.close();
  await checkpoints.close();
  await pool.end();
}
