/**
 * Where the Redis consume path's cost sits below the dispatcher: the same Harrier jobs consumed by
 * three systems, in alternating rounds.
 *
 * - `worker`: a bare BullMQ `Worker` whose processor returns at once (the floor).
 * - `receiver worker`: the broker's `ReceiverWorker` (slot budget, fetch-next hand-over, the same
 *   processor): what the budget costs.
 * - `receiver`: `BullMqBroker.receiver()` iterated with an ack at once for each delivery, at most 16
 *   unsettled: BullMQ's processor hands each job to the receiver and waits for the ack, with no
 *   dispatcher, decode or handler.
 *
 * Run: `npm run bench:redis-receiver-split` (BENCH_N, default 20000;
 * BENCH_ROUNDS, default 3) against `REDIS_URL` (default redis://127.0.0.1:6379). Add
 * `--trace-gc-nvp` to node to see each system's scavenges.
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { silentLogger } from '../src/index.js';
import { BullMqBroker } from '../src/redis/index.js';
import { ReceiverWorker } from '../src/redis/receiver-worker.js';
import { SlotBudget } from '../src/broker/slot-budget.js';
import { PlaceOrder, payloadOf } from './place-order.js';
import { produceWithHarrier } from './produce-support.js';
import { Counter, benchPrefix, deleteKeys, fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const CONCURRENCY = 16;
const QUEUE = `cmd~${PlaceOrder.type}`;

type System = 'worker' | 'receiver worker' | 'receiver';
interface Sample {
  readonly rate: number;
  readonly cpuUs: number;
}

const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });

/** Acks every delivery of `broker`'s receiver at once, at most {@link CONCURRENCY} unsettled, until `n`. */
async function ackAll(broker: BullMqBroker, n: number): Promise<void> {
  const abort = new AbortController();
  const deliveries = broker.receiver({ endpoint: 'bench', prefetch: CONCURRENCY, signal: abort.signal });
  const iterator = deliveries[Symbol.asyncIterator]();
  let unsettled = 0;
  let acked = 0;
  let wake: (() => void) | undefined;
  try {
    while (acked + unsettled < n) {
      if (unsettled >= CONCURRENCY) {
        await new Promise<void>((resolve) => (wake = resolve));
        continue;
      }
      const next = await iterator.next();
      if (next.done === true) throw new Error(`The receiver ended after ${acked} of ${n} deliveries`);
      unsettled++;
      void broker.ack(next.value.id).then(() => {
        unsettled--;
        acked++;
        const woken = wake;
        wake = undefined;
        woken?.();
      });
    }
    while (acked < n) await new Promise<void>((resolve) => (wake = resolve));
  } finally {
    abort.abort();
    await iterator.return?.();
  }
}

/** Publishes `n` messages as Harrier does, then consumes them with `system`. */
async function run(system: System, n: number): Promise<Sample> {
  const prefix = benchPrefix();
  const broker = new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  let worker: Worker | undefined;
  try {
    await broker.register('bench', [
      { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
    ]);
    await produceWithHarrier(broker, PlaceOrder, payloadOf, n);
    const cpu = process.cpuUsage();
    const started = performance.now();
    if (system === 'receiver') {
      await ackAll(broker, n);
    } else {
      const done = new Counter(180_000);
      const processor = (): Promise<void> => Promise.resolve();
      const options = { connection, prefix, concurrency: CONCURRENCY };
      if (system === 'worker') {
        worker = new Worker(QUEUE, processor, options);
      } else {
        const budgeted = new ReceiverWorker(QUEUE, processor, options, new SlotBudget(CONCURRENCY));
        worker = budgeted;
        void budgeted.run();
      }
      worker.on('completed', () => {
        done.hit();
      });
      await done.until(n);
    }
    const used = process.cpuUsage(cpu);
    return { rate: n / ((performance.now() - started) / 1000), cpuUs: (used.user + used.system) / n };
  } finally {
    await worker?.close();
    connection.disconnect();
    await broker.close();
    await deleteKeys(admin, prefix);
  }
}

const systems: System[] = ['worker', 'receiver worker', 'receiver'];
for (const system of systems) await run(system, Math.min(N, 2_000));
const samples = new Map<System, Sample[]>(systems.map((s) => [s, []]));
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? systems : [...systems].reverse();
  for (const system of order) samples.get(system)?.push(await run(system, N));
}
const of = (system: System): Sample[] => samples.get(system) ?? [];
const floorCpu = median(of('worker').map((s) => s.cpuUs));
console.log(
  `Consume below the dispatcher: Harrier's jobs, concurrency ${CONCURRENCY}, N = ${N}, ${ROUNDS} rounds alternating, Node ${process.version}\n`,
);
console.log(
  table(
    ['system', 'msg/s (median)', 'CPU µs/msg (median)', 'CPU over worker', 'every round msg/s'],
    systems.map((system) => {
      const cpu = median(of(system).map((s) => s.cpuUs));
      return [
        system,
        fmtRate(median(of(system).map((s) => s.rate))),
        cpu.toFixed(1),
        (cpu - floorCpu).toFixed(1),
        of(system)
          .map((s) => fmtRate(s.rate))
          .join(' '),
      ];
    }),
  ),
);
admin.disconnect();
