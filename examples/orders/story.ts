/**
 * The printed story both single-process programs tell (main.ts in memory, postgres-main.ts on
 * PostgreSQL): placing the sample orders, then the read model, the sagas, the dead letters and
 * their replay.
 */
import { MessageValidationError, type InputOf, type MessageBus, type SagaStore } from '../../src/index.js';
import type { BusActivity } from './activity.js';
import type { OrdersBusOptions } from './app.js';
import { ListOrderSummaries, PlaceOrder, type OrderSummary } from './messages.js';
import { fulfilmentLines } from './order-fulfilment.js';
import {
  EXAMPLE_PAYMENT_DUE_MS,
  GATEWAY_TIMEOUTS,
  ORDERS,
  WAREHOUSE_BUSY,
  dollars,
  expectedDeliveries,
} from './sample-orders.js';
import { Inventory, SimulatedPaymentGateway, type SimulatedLegacyCrm } from './services.js';

type Print = (line?: string) => void;

/** The bus options of the story: the failing services, printed by `activity`, sagas in `sagaStore`. */
export function storyBusOptions(
  activity: BusActivity,
  crm: SimulatedLegacyCrm,
  sagaStore: SagaStore,
): OrdersBusOptions {
  return {
    hooks: activity.hooks,
    paymentGateway: new SimulatedPaymentGateway({ timeouts: GATEWAY_TIMEOUTS }),
    inventory: new Inventory({ busy: WAREHOUSE_BUSY }),
    legacyCrm: crm,
    sagaStore,
    paymentDueMs: EXAMPLE_PAYMENT_DUE_MS,
  };
}

/** The order summaries as a table with a header line. */
export function printSummaryTable(print: Print, summaries: readonly OrderSummary[]): void {
  print(
    `  ${'order'.padEnd(8)}${'customer'.padEnd(10)}${'items'.padEnd(7)}${'total'.padEnd(10)}${'stock'.padEnd(10)}payment`,
  );
  for (const s of summaries) {
    print(
      `  ${s.orderId.padEnd(8)}${s.customer.padEnd(10)}${String(s.items).padEnd(7)}${dollars(s.totalCents).padEnd(10)}${(s.reservationId ?? '-').padEnd(10)}${s.paymentId ?? '-'}`,
    );
  }
}

/** Prints the failures the run simulates. */
export function printFailuresAhead(print: Print): void {
  print('The payment gateway will time out twice for o-1002; the legacy CRM is down.');
  print(
    `The warehouse is busy twice for o-1001; o-1003 is paid by bank transfer, which never comes (payment due after ${EXAMPLE_PAYMENT_DUE_MS / 1000} s).`,
  );
  print();
}

/** How a program places an order: the verb printed on the timeline, and what a refusal means. */
export interface OrderPlacement {
  /** Who places it, on the timeline: `bus.send`, `outbox.send`. */
  readonly verb: string;
  /** What happened to a placed order, on the timeline: `sent`, `recorded`. */
  readonly placed: string;
  /** What the refusal of the invalid order left behind: `nothing was sent`. */
  readonly refused: string;
  /** Places one order; rejects with MessageValidationError for the invalid one. */
  place(order: InputOf<typeof PlaceOrder>): Promise<unknown>;
}

/**
 * Places the sample orders, then an invalid one the schema refuses, and waits until the bus has
 * done what they cause.
 */
export async function placeSampleOrders(
  activity: BusActivity,
  placement: OrderPlacement,
  timeoutMs: number,
): Promise<void> {
  for (const order of ORDERS) {
    await placement.place(order);
    activity.note(placement.placed, placement.verb, PlaceOrder.type, order.orderId);
  }
  try {
    await placement.place({
      orderId: 'o-1004',
      customer: 'Bob',
      lines: [{ sku: 'desk', quantity: 0, unitPriceCents: 1 }],
    });
  } catch (error) {
    if (!(error instanceof MessageValidationError)) throw error;
    const fields = error.issues.map((issue) => issue.path.join('.')).join(', ');
    activity.note(
      'refused',
      placement.verb,
      PlaceOrder.type,
      'o-1004',
      `${error.code} (${fields}): ${placement.refused}`,
    );
  }
  await activity.waitFor(expectedDeliveries(ORDERS), timeoutMs);
}

/** Where the report says the read model and the saga instances are. */
export interface ReportSources {
  /** Where the summaries come from: `bus.execute(ListOrderSummaries)`. */
  readonly summaries: string;
  /** Where the saga instances are: `the saga store`. */
  readonly sagas: string;
}

/**
 * Prints the order summaries (from `bus.execute`), the fulfilment sagas, the dead letters, then
 * brings the CRM back and replays them.
 */
export async function printReport(
  bus: MessageBus,
  parts: {
    readonly print: Print;
    readonly activity: BusActivity;
    readonly crm: SimulatedLegacyCrm;
    readonly sagaStore: SagaStore;
    readonly timeoutMs: number;
  },
  sources: ReportSources,
): Promise<void> {
  const { print, activity, crm } = parts;
  const summaries = await bus.execute(ListOrderSummaries, {});
  print();
  print(`Order summaries (${sources.summaries}): ${summaries.length} orders`);
  printSummaryTable(print, summaries);

  print();
  print(`Order fulfilment (the orders.Fulfilment saga instances in ${sources.sagas}):`);
  for (const line of await fulfilmentLines(parts.sagaStore, EXAMPLE_PAYMENT_DUE_MS)) print(`  ${line}`);

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
  await activity.waitFor({ handled: before + replayed }, parts.timeoutMs);
  print(
    `  ${replayed} replayed; CRM notified of ${crm.notified.join(', ')}; dead letters left: ${await bus.deadLetters.count()}`,
  );
}
