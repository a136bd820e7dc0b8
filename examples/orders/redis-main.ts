/**
 * The orders example on Redis: two worker processes compete for the orders endpoint's messages on
 * BullMQ, and this process is the producer.
 *
 * Run it with `REDIS_URL=redis://127.0.0.1:6379 npm run example:redis`. The story is the one of
 * `npm start` (see main.ts), across processes:
 * - two workers (examples/orders/redis-worker.ts) start the same `createOrdersBus` on a
 *   `BullMqBroker` and a `RedisDeadLetterStore`, under a key prefix made for this run;
 * - this process sends three PlaceOrder commands and waits until the workers report every handled
 *   delivery over IPC (the saga's payment timeouts included, 2 s after the orders) and the three
 *   NotifyLegacyCrm dead letters are in Redis;
 * - it prints which worker handled what, the order summaries (each worker's read model holds the
 *   events it happened to project, so they are merged here), how the fulfilment saga ended each
 *   order (its instances read from Redis with a RedisSagaStore) and the dead letters read from Redis;
 * - the CRM comes back in both workers, this process replays the dead letters from Redis, and
 *   whichever worker takes them notifies the CRM;
 * - it stops the workers with SIGTERM (each runs `bus.stop()`), deletes the run's keys and exits 0.
 *
 * Exit codes: 0 done, 1 the example failed, 2 REDIS_URL is missing or Redis cannot be reached.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { createBus, MessageValidationError, silentLogger } from '../../src/index.js';
import {
  BullMqBroker,
  RedisDeadLetterStore,
  RedisSagaStore,
  describeRedisUrl,
} from '../../src/redis/index.js';
import { PlaceOrder, type OrderSummary } from './messages.js';
import { fulfilmentLines } from './order-fulfilment.js';
import { EXAMPLE_PAYMENT_DUE_MS, ORDERS, expectedDeliveries } from './sample-orders.js';
import { WORKER_ENV, type ActivityReport, type ProducerMessage, type WorkerMessage } from './redis-ipc.js';
import { printSummaryTable } from './story.js';

const WORKERS = 2;
const TIMEOUT_MS = 20_000;
/** How long a worker may take to drain and close after SIGTERM before it is killed. */
const STOP_TIMEOUT_MS = 15_000;

const print = (line = ''): void => void process.stdout.write(`${line}\n`);
const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));
const startedAt = Date.now();

/** Prints why the example cannot run and exits with code 2. */
function refuse(reason: string): never {
  process.stderr.write(`${reason}\n`);
  process.exit(2);
}

const url = process.env.REDIS_URL;
if (url === undefined || url === '') {
  refuse(
    'REDIS_URL is not set: start Redis (e.g. `redis-server --port 6379`) and run `REDIS_URL=redis://127.0.0.1:6379 npm run example:redis`',
  );
}
const where = describeRedisUrl(url);

/** The producer's own connection, to check that Redis answers and to delete the run's keys. */
const admin = new Redis(url, {
  lazyConnect: true,
  connectTimeout: 3_000,
  maxRetriesPerRequest: 0,
  enableOfflineQueue: false,
  retryStrategy: () => null,
});
// The connection's own error says why (refused, unknown host); the failed command only says "closed".
let connectionError: unknown;
admin.on('error', (error: unknown) => {
  connectionError = error;
});
try {
  await admin.connect();
  await admin.ping();
} catch (error) {
  admin.disconnect();
  refuse(
    `Redis is not reachable at ${where} (${messageOf(connectionError ?? error)}): start Redis there (e.g. \`redis-server --port 6379\`), or set REDIS_URL to a running server`,
  );
}

/** A fresh prefix per run, so runs never see each other's queues; a hash tag keeps it one slot. */
const prefix = `{harrier-example-${randomBytes(4).toString('hex')}}`;

/** Wakes waiters whenever a worker reports something. */
class Changes {
  #waiters: (() => void)[] = [];

  notify(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  /** Resolves on the next change, or after `ms` so state kept elsewhere (Redis) is checked again. */
  next(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.#waiters.push(done);
    });
  }
}

const changes = new Changes();

/** One forked worker process and what it reported. */
class WorkerProcess {
  readonly label: string;
  readonly child: ChildProcess;
  readonly handledBy = new Map<string, number>();
  readonly ready: Promise<void>;
  handled = 0;
  retrying = 0;
  deadLettered = 0;
  summaries: readonly OrderSummary[] | undefined;
  crmAvailable = false;
  readonly exited: Promise<number | null>;

  constructor(index: number) {
    this.child = fork(fileURLToPath(new URL('./redis-worker.ts', import.meta.url)), [], {
      // tsx's loader, resolved from here, so the worker's TypeScript runs whatever the working directory.
      execArgv: ['--import', import.meta.resolve('tsx')],
      env: { ...process.env, [WORKER_ENV.url]: url, [WORKER_ENV.prefix]: prefix },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.label = `w${index + 1} (pid ${this.child.pid ?? '?'})`;
    this.exited = once(this.child, 'exit').then(
      ([code]) => code as number | null,
      // 'error' instead of 'exit': the process could not be started at all.
      () => null,
    );
    this.ready = new Promise((resolve, reject) => {
      this.child.on('message', (message: WorkerMessage) => {
        switch (message.kind) {
          case 'ready':
            resolve();
            break;
          case 'failed':
            reject(new Error(`${this.label} failed: ${message.error}`));
            break;
          case 'activity':
            this.#record(message);
            break;
          case 'summaries':
            this.summaries = message.rows;
            break;
          case 'crm-available':
            this.crmAvailable = true;
            break;
        }
        changes.notify();
      });
      void this.exited.then((code) => {
        reject(new Error(`${this.label} exited with code ${code ?? 'null'} before it was ready`));
        changes.notify();
      });
    });
  }

  tell(message: ProducerMessage): void {
    this.child.send(message);
  }

  /** SIGTERM, as a process manager stops a service; SIGKILL if it has not exited in time. */
  async stop(): Promise<number | null> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.child.exitCode;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  #record(report: ActivityReport): void {
    if (report.what === 'handled') {
      this.handled++;
      this.handledBy.set(report.handler, (this.handledBy.get(report.handler) ?? 0) + 1);
    }
    if (report.what === 'retrying') this.retrying++;
    if (report.what === 'dead-lettered') this.deadLettered++;
    timeline(report.what, this.label, report.handler, report.type, report.key, report.detail);
  }
}

function timeline(what: string, where: string, who: string, type: string, key: string, detail = ''): void {
  const at = `+${Date.now() - startedAt} ms`.padStart(9);
  print(
    `${at}  ${where.padEnd(14)}  ${what.padEnd(13)}  ${who.padEnd(25)}  ${type.padEnd(21)}  ${key.padEnd(6)}  ${detail}`.trimEnd(),
  );
}

/** Resolves once `reached()` is true, re-checked on every worker report and every 100 ms. */
async function waitUntil(
  reached: () => boolean | Promise<boolean>,
  describe: () => string | Promise<string>,
): Promise<void> {
  const deadline = Date.now() + TIMEOUT_MS;
  while (!(await reached())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${TIMEOUT_MS} ms: ${await describe()}`);
    await changes.next(100);
  }
}

/** Deletes every key of this run. */
async function deleteRunKeys(): Promise<number> {
  let cursor = '0';
  let deleted = 0;
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
    cursor = next;
    if (keys.length > 0) deleted += await admin.unlink(...keys);
  } while (cursor !== '0');
  return deleted;
}

/** Folds the workers' partial read models into one row per order. */
function mergeSummaries(parts: readonly (readonly OrderSummary[])[]): OrderSummary[] {
  const rows = new Map<string, OrderSummary>();
  for (const row of parts.flat()) {
    const merged = rows.get(row.orderId) ?? { orderId: row.orderId, customer: '', items: 0, totalCents: 0 };
    rows.set(row.orderId, {
      ...merged,
      // A worker that only projected a later event holds an empty row for the order's fields.
      ...(row.customer !== ''
        ? { customer: row.customer, items: row.items, totalCents: row.totalCents }
        : {}),
      ...(row.reservationId !== undefined ? { reservationId: row.reservationId } : {}),
      ...(row.paymentId !== undefined ? { paymentId: row.paymentId } : {}),
    });
  }
  return [...rows.values()].sort((a, b) => a.orderId.localeCompare(b.orderId));
}

const describeRow = (row: OrderSummary): string =>
  [
    row.customer !== '' ? 'placed' : undefined,
    row.reservationId !== undefined ? 'stock' : undefined,
    row.paymentId !== undefined ? 'payment' : undefined,
  ]
    .filter((part) => part !== undefined)
    .join('+');

// The producer: an endpoint that only sends, so it is never started and takes no messages.
const producer = createBus({
  endpoint: 'orders-producer',
  broker: new BullMqBroker({ connection: url, prefix }),
  deadLetters: new RedisDeadLetterStore({ connection: url, prefix }),
  definitions: [PlaceOrder],
  logger: silentLogger,
});
/** The workers' saga store, read here to tell how each order ended. */
const sagaStore = new RedisSagaStore({ connection: url, prefix });
const workers: WorkerProcess[] = [];

let cleaning: Promise<void> | undefined;
/** Stops the workers (SIGTERM), closes the producer and deletes the run's keys; runs once. */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    const codes = await Promise.all(workers.map((w) => w.stop()));
    workers.forEach((w, i) => {
      print(`  ${w.label} exited with code ${codes[i] ?? 'null'}`);
      if (codes[i] !== 0) process.exitCode = 1;
    });
    await producer.stop();
    await sagaStore.close();
    const deleted = await deleteRunKeys().catch((error: unknown) => {
      print(`Could not delete the keys under ${prefix}: ${messageOf(error)}`);
      process.exitCode = 1;
      return 0;
    });
    print(`Deleted ${deleted} keys under ${prefix}.`);
    await admin.quit();
  })();
  return cleaning;
}

// Ctrl-C (or npm passing on a SIGTERM): stop the workers and still delete this run's keys.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.once(signal, () => {
    print(`${signal}: stopping the workers and deleting the keys of this run.`);
    void cleanUp().finally(() => process.exit(code));
  });
}

print(`Harrier orders example on Redis at ${where}, key prefix ${prefix}`);
print('The payment gateway times out twice for o-1002 in each worker; the legacy CRM is down.');
print(
  `The warehouse is busy twice for o-1001; o-1003 is paid by bank transfer, which never comes (payment due after ${EXAMPLE_PAYMENT_DUE_MS / 1000} s).`,
);
print();

try {
  for (let i = 0; i < WORKERS; i++) workers.push(new WorkerProcess(i));
  await Promise.all(workers.map((w) => w.ready));
  print(`Workers ready: ${workers.map((w) => w.label).join(', ')}, both on endpoint "orders"`);
  print();

  print('Timeline (ms since start):');
  for (const order of ORDERS) {
    await producer.send(PlaceOrder, order);
    timeline('sent', 'producer', 'bus.send', PlaceOrder.type, order.orderId);
  }
  try {
    await producer.send(PlaceOrder, {
      orderId: 'o-1004',
      customer: 'Bob',
      lines: [{ sku: 'desk', quantity: 0, unitPriceCents: 1 }],
    });
  } catch (error) {
    if (!(error instanceof MessageValidationError)) throw error;
    const fields = error.issues.map((issue) => issue.path.join('.')).join(', ');
    timeline(
      'refused',
      'producer',
      'bus.send',
      PlaceOrder.type,
      'o-1004',
      `${error.code} (${fields}): nothing was sent`,
    );
  }

  const expected = expectedDeliveries(ORDERS);
  const handled = (): number => workers.reduce((sum, w) => sum + w.handled, 0);
  await waitUntil(
    async () =>
      handled() >= expected.handled && (await producer.deadLetters.count()) >= expected.deadLettered,
    async () =>
      `expected ${JSON.stringify(expected)}; workers reported ${handled()} handled, Redis holds ${await producer.deadLetters.count()} dead letters`,
  );

  print();
  print('Per worker (reported over IPC):');
  for (const w of workers) {
    const by = [...w.handledBy].map(([handler, n]) => `${handler} ${n}`).join(', ');
    print(`  ${w.label}: ${w.handled} handled (${by || 'none'}), ${w.deadLettered} dead-lettered`);
  }

  for (const w of workers) {
    w.summaries = undefined;
    w.tell({ kind: 'list-summaries' });
  }
  await waitUntil(
    () => workers.every((w) => w.summaries !== undefined),
    () => 'the workers did not answer ListOrderSummaries',
  );
  print();
  print(
    "Order summaries: each worker's read model holds what it projected (bus.execute(ListOrderSummaries))",
  );
  for (const w of workers) {
    const rows = (w.summaries ?? []).map((row) => `${row.orderId} ${describeRow(row)}`).join(', ');
    print(`  ${w.label}: ${rows || 'nothing'}`);
  }
  const summaries = mergeSummaries(workers.map((w) => w.summaries ?? []));
  print(`merged: ${summaries.length} orders`);
  printSummaryTable(print, summaries);

  print();
  print('Order fulfilment (the orders.Fulfilment saga instances, read from Redis):');
  for (const line of await fulfilmentLines(sagaStore, EXAMPLE_PAYMENT_DUE_MS)) print(`  ${line}`);

  const { records } = await producer.deadLetters.list();
  print();
  print(`Dead letters read from Redis (RedisDeadLetterStore.list()): ${records.length}`);
  for (const r of records) {
    print(
      `  ${r.handler ?? '(none)'} / ${r.type ?? '(unknown)'} / ${r.partitionKey ?? '-'}: reason ${r.reason}, ${r.attemptCount} attempts, fingerprint ${r.fingerprint}`,
    );
    print(`    last error: ${r.error.name}: ${r.error.message}`);
    print(`    message ${r.messageId ?? '-'}, dead letter ${r.id}`);
  }

  print();
  print('The CRM is back in both workers: replaying the dead letters from Redis (same message ids):');
  for (const w of workers) w.tell({ kind: 'bring-crm-back' });
  await waitUntil(
    () => workers.every((w) => w.crmAvailable),
    () => 'the workers did not confirm that the CRM is back',
  );
  const before = handled();
  const results = await producer.replayDeadLetters(
    records.map((r) => r.id),
    { by: 'orders-redis-example' },
  );
  for (const r of results) if (!r.ok) print(`  ${r.id} not replayed: ${r.error}: ${r.message}`);
  const replayed = results.filter((r) => r.ok).length;
  await waitUntil(
    async () => handled() >= before + replayed && (await producer.deadLetters.count()) === 0,
    async () =>
      `expected ${before + replayed} handled and no dead letters; saw ${handled()} handled, ${await producer.deadLetters.count()} dead letters`,
  );
  print(`  ${replayed} replayed; dead letters left in Redis: ${await producer.deadLetters.count()}`);

  print();
  const sum = (count: (w: WorkerProcess) => number): number => workers.reduce((n, w) => n + count(w), 0);
  print(
    `Done: ${handled()} handled, ${sum((w) => w.retrying)} retries, ${sum((w) => w.deadLettered)} dead-lettered across ${workers.length} workers. Stopping them with SIGTERM:`,
  );
} catch (error) {
  print(`The example failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
} finally {
  await cleanUp();
}
