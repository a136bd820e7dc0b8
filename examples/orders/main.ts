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
import { InMemorySagaStore, MessageValidationError } from '../../src/index.js';
import { BusActivity } from './activity.js';
import { createOrdersBus } from './app.js';
import { ListOrderSummaries, PlaceOrder } from './messages.js';
import { fulfilmentLines } from './order-fulfilment.js';
import {
  EXAMPLE_PAYMENT_DUE_MS,
  GATEWAY_TIMEOUTS,
  ORDERS,
  WAREHOUSE_BUSY,
  dollars,
  expectedDeliveries,
} from './sample-orders.js';
import { Inventory, SimulatedLegacyCrm, SimulatedPaymentGateway } from './services.js';

const TIMEOUT_MS = 8_000;

const print = (line = ''): void => void process.stdout.write(`${line}\n`);

const crm = new SimulatedLegacyCrm({ available: false });
const activity = new BusActivity(print);
const sagaStore = new InMemorySagaStore();
const bus = createOrdersBus({
  hooks: activity.hooks,
  paymentGateway: new SimulatedPaymentGateway({ timeouts: GATEWAY_TIMEOUTS }),
  inventory: new Inventory({ busy: WAREHOUSE_BUSY }),
  legacyCrm: crm,
  sagaStore,
  paymentDueMs: EXAMPLE_PAYMENT_DUE_MS,
});

print(`Harrier orders example: endpoint "${bus.endpoint}" on the in-memory broker`);
print('The payment gateway will time out twice for o-1002; the legacy CRM is down.');
print(
  `The warehouse is busy twice for o-1001; o-1003 is paid by bank transfer, which never comes (payment due after ${EXAMPLE_PAYMENT_DUE_MS / 1000} s).`,
);
print();

try {
  await bus.start();

  print('Timeline (ms since start):');
  for (const order of ORDERS) {
    await bus.send(PlaceOrder, order);
    activity.note('sent', 'bus.send', PlaceOrder.type, order.orderId);
  }
  // The schema refuses a bad order on send, before anything reaches the broker.
  try {
    await bus.send(PlaceOrder, {
      orderId: 'o-1004',
      customer: 'Bob',
      lines: [{ sku: 'desk', quantity: 0, unitPriceCents: 1 }],
    });
  } catch (error) {
    if (!(error instanceof MessageValidationError)) throw error;
    const fields = error.issues.map((issue) => issue.path.join('.')).join(', ');
    activity.note(
      'refused',
      'bus.send',
      PlaceOrder.type,
      'o-1004',
      `${error.code} (${fields}): nothing was sent`,
    );
  }

  await activity.waitFor(expectedDeliveries(ORDERS), TIMEOUT_MS);

  const summaries = await bus.execute(ListOrderSummaries, {});
  print();
  print(`Order summaries (bus.execute(ListOrderSummaries)): ${summaries.length} orders`);
  print(
    `  ${'order'.padEnd(8)}${'customer'.padEnd(10)}${'items'.padEnd(7)}${'total'.padEnd(10)}${'stock'.padEnd(10)}payment`,
  );
  for (const s of summaries) {
    print(
      `  ${s.orderId.padEnd(8)}${s.customer.padEnd(10)}${String(s.items).padEnd(7)}${dollars(s.totalCents).padEnd(10)}${(s.reservationId ?? '-').padEnd(10)}${s.paymentId ?? '-'}`,
    );
  }

  print();
  print('Order fulfilment (the orders.Fulfilment saga instances in the saga store):');
  for (const line of await fulfilmentLines(sagaStore, EXAMPLE_PAYMENT_DUE_MS)) print(`  ${line}`);

  const { records } = await bus.deadLetters.list();
  print();
  print(`Dead letters (bus.deadLetters.list()): ${records.length}`);
  for (const r of records) {
    print(
      `  ${r.handler ?? '(none)'} / ${r.type ?? '(unknown)'} / ${r.partitionKey ?? '-'}: reason ${r.reason}, ${r.attemptCount} attempts, fingerprint ${r.fingerprint}`,
    );
    print(`    last error: ${r.error.name}: ${r.error.message}`);
    print(`    message ${r.messageId ?? '-'}, dead letter ${r.id}`);
  }
  const fingerprints = new Set(records.map((r) => r.fingerprint));
  print(
    fingerprints.size === 1
      ? '  (1 distinct fingerprint: one cause behind all of them)'
      : `  (${fingerprints.size} distinct fingerprints)`,
  );

  print();
  print('The CRM is back: replaying the dead letters (same message ids, fresh attempts):');
  crm.available = true;
  const before = activity.counts.handled;
  const results = await bus.replayDeadLetters(
    records.map((r) => r.id),
    { by: 'orders-example' },
  );
  const replayed = results.filter((r) => r.ok).length;
  await activity.waitFor({ handled: before + replayed }, TIMEOUT_MS);
  print(
    `  ${replayed} replayed; CRM notified of ${crm.notified.join(', ')}; dead letters left: ${await bus.deadLetters.count()}`,
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
