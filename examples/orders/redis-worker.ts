/**
 * One worker process of the Redis orders example: the orders endpoint on a BullMqBroker, with dead
 * letters and saga instances in Redis. Every worker on the same prefix competes for the same queues.
 *
 * Started by redis-main.ts through `child_process.fork`; it reports what its bus does over IPC and
 * stops gracefully on SIGTERM (`bus.stop()` drains in-flight handlers, then closes every connection).
 */
import { BullMqBroker, RedisDeadLetterStore, RedisSagaStore } from '../../src/redis/index.js';
import { createOrdersBus } from './app.js';
import { ListOrderSummaries } from './messages.js';
import { WORKER_ENV, type ActivityReport, type ProducerMessage, type WorkerMessage } from './redis-ipc.js';
import { EXAMPLE_PAYMENT_DUE_MS, GATEWAY_TIMEOUTS, WAREHOUSE_BUSY } from './sample-orders.js';
import { Inventory, SimulatedLegacyCrm, SimulatedPaymentGateway } from './services.js';

const url = process.env[WORKER_ENV.url];
const prefix = process.env[WORKER_ENV.prefix];
if (process.send === undefined || url === undefined || prefix === undefined) {
  process.stderr.write(
    `redis-worker.ts is started by examples/orders/redis-main.ts: run \`REDIS_URL=redis://127.0.0.1:6379 npm run example:redis\`\n`,
  );
  process.exit(2);
}

const report = (message: WorkerMessage): void => {
  // The channel is gone once the producer exits; there is nobody left to tell.
  if (process.connected) process.send?.(message);
};
const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));
const activity = (
  what: ActivityReport['what'],
  handler: string,
  type: string,
  key: string,
  detail = '',
): void => {
  report({ kind: 'activity', what, handler, type, key, detail });
};

const crm = new SimulatedLegacyCrm({ available: false });
const bus = createOrdersBus({
  broker: new BullMqBroker({ connection: url, prefix }),
  deadLetters: new RedisDeadLetterStore({ connection: url, prefix }),
  // Both workers run the saga's steps; the store's compare-and-set keeps their updates of one
  // order from overwriting each other.
  sagaStore: new RedisSagaStore({ connection: url, prefix }),
  paymentDueMs: EXAMPLE_PAYMENT_DUE_MS,
  // The same story as `npm start`, in every worker: whichever worker takes o-1002's ChargePayment
  // (or o-1001's ReserveStock) sees its two failures (an ordered message is retried by the worker
  // that holds it).
  paymentGateway: new SimulatedPaymentGateway({ timeouts: GATEWAY_TIMEOUTS }),
  inventory: new Inventory({ busy: WAREHOUSE_BUSY }),
  legacyCrm: crm,
  hooks: {
    onHandled: ({ envelope, handler, attempt }) => {
      activity(
        'handled',
        handler,
        envelope.type,
        envelope.meta.partitionKey ?? '',
        attempt > 1 ? `on attempt ${attempt}` : '',
      );
    },
    onRetrying: ({ envelope, handler, attempt, error, retryAt }) => {
      const delay = Math.max(0, retryAt - Date.now());
      activity(
        'retrying',
        handler,
        envelope.type,
        envelope.meta.partitionKey ?? '',
        `attempt ${attempt} failed (${messageOf(error)}); next in ~${delay} ms`,
      );
    },
    onDeadLettered: ({ record }) => {
      activity(
        'dead-lettered',
        record.handler ?? '(none)',
        record.type ?? '(unknown)',
        record.partitionKey ?? '',
        `${record.reason} after ${record.attemptCount} attempts: ${record.error.message}`,
      );
    },
  },
});

let stopping: Promise<void> | undefined;
/** Stops taking work, lets in-flight handlers finish, closes the broker and the store, then exits. */
const stop = (): Promise<void> =>
  (stopping ??= bus
    .stop({ gracePeriodMs: 5_000 })
    .then(() => {
      process.exitCode ??= 0;
    })
    .catch((error: unknown) => {
      process.stderr.write(`worker ${process.pid} did not stop cleanly: ${messageOf(error)}\n`);
      process.exitCode = 1;
    })
    .finally(() => {
      if (process.connected) process.disconnect();
    }));

process.once('SIGTERM', () => void stop());
// Ctrl-C in a terminal reaches the whole process group, workers included: stop as gracefully.
process.once('SIGINT', () => void stop());
// A producer that died without stopping its workers must not leave them running.
process.once('disconnect', () => void stop());
process.on('message', (message: ProducerMessage) => {
  switch (message.kind) {
    case 'list-summaries':
      bus.execute(ListOrderSummaries, {}).then(
        (rows) => {
          report({ kind: 'summaries', rows });
        },
        (error: unknown) => {
          report({ kind: 'failed', error: `ListOrderSummaries failed: ${messageOf(error)}` });
        },
      );
      break;
    case 'bring-crm-back':
      crm.available = true;
      report({ kind: 'crm-available' });
      break;
  }
});

try {
  await bus.start();
  report({ kind: 'ready' });
} catch (error) {
  report({ kind: 'failed', error: messageOf(error) });
  process.exitCode = 1;
  await stop();
}
