/**
 * The orders example: places three orders on the in-memory broker and prints what happens.
 *
 * Run it with `npm start`. The story:
 * - PlaceOrder is handled and records OrderPlaced, published once the handler succeeds;
 * - OrderPlaced fans out to five subscriptions: ReserveStockOnOrderPlaced (sends ReserveStock),
 *   ChargePayment, NotifyLegacyCrm, the OrderSummary projection and the orders.Fulfilment saga;
 * - the payment gateway times out twice for order o-1002, so ChargePayment retries with backoff,
 *   and the warehouse is busy twice for o-1001, so ReserveStock does;
 * - the legacy CRM is down, so NotifyLegacyCrm dead-letters each order after 3 attempts, while the
 *   other subscriptions of the same events carry on;
 * - the fulfilment saga (order-fulfilment.ts) ships o-1001 (paid before its stock is reserved) and
 *   o-1002 (paid after), and cancels o-1003 (by bank transfer, never paid) when its payment is due,
 *   after 2 s here instead of 15 minutes;
 * - a query reads the order-summary read model, the saga store tells how each order ended; the dead
 *   letters are listed, then replayed once the CRM is back.
 */
import { InMemorySagaStore } from '../../src/index.js';
import { BusActivity } from './activity.js';
import { createOrdersBus } from './app.js';
import { PlaceOrder } from './messages.js';
import { SimulatedLegacyCrm } from './services.js';
import { placeSampleOrders, printFailuresAhead, printReport, storyBusOptions } from './story.js';

const TIMEOUT_MS = 8_000;

const print = (line = ''): void => void process.stdout.write(`${line}\n`);

const crm = new SimulatedLegacyCrm({ available: false });
const activity = new BusActivity(print);
const sagaStore = new InMemorySagaStore();
const bus = createOrdersBus({
  ...storyBusOptions(activity, crm, sagaStore),
});

print(`Harrier orders example: endpoint "${bus.endpoint}" on the in-memory broker`);
printFailuresAhead(print);

try {
  await bus.start();

  print('Timeline (ms since start):');
  // The schema refuses a bad order on send, before anything reaches the broker.
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
    { summaries: 'bus.execute(ListOrderSummaries)', sagas: 'the saga store' },
  );

  const { handled, retrying, deadLettered } = activity.counts;
  print();
  print(`Done: ${handled} handled, ${retrying} retries, ${deadLettered} dead-lettered. Stopping the bus.`);
} catch (error) {
  print(`The example failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
} finally {
  await bus.stop({ gracePeriodMs: 2_000 });
}
