/**
 * A minimal loop of Harrier in-process calls for a CPU profile, with none of the bench's Nest rows in
 * it: `npm run bench:build && node --cpu-prof --cpu-prof-dir /tmp/prof .bench/bench/profile-execute.js`,
 * then read the profile's self time (Chrome DevTools, or any .cpuprofile reader). BENCH_N sets the
 * number of calls (default 200000), BENCH_CALLERS the concurrent callers of `execute` (default 1).
 * BENCH_PATH=send profiles `send` -> handle -> ack on the in-memory broker instead (one producer
 * awaiting each `send`, concurrency 16, as the first row of bench/in-memory.ts).
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { InMemoryBroker } from '../src/index.js';
import { PlaceOrder, payloadOf, placeOrderBus } from './place-order.js';
import { Counter } from './support.js';

const N = Number(process.env.BENCH_N ?? 200_000);
const CALLERS = Number(process.env.BENCH_CALLERS ?? 1);
const SEND = process.env.BENCH_PATH === 'send';

const handled = new Counter(120_000);
const bus = placeOrderBus(new InMemoryBroker(), 16, () => {
  handled.hit();
});
await bus.start();
let next = 0;
const caller = async (): Promise<void> => {
  while (next < N) {
    const i = next++;
    await bus.execute(PlaceOrder, payloadOf(i));
  }
};
const started = performance.now();
const cpu = process.cpuUsage();
if (SEND) {
  for (let i = 0; i < N; i++) await bus.send(PlaceOrder, payloadOf(i));
  await handled.until(N);
} else {
  await Promise.all(Array.from({ length: CALLERS }, caller));
}
const ms = performance.now() - started;
const used = process.cpuUsage(cpu);
const heap = process.memoryUsage().heapUsed / (1024 * 1024);
console.log(
  `${N} ${SEND ? 'send -> handle -> ack' : `execute calls, ${CALLERS} caller(s)`}: ${Math.round(N / (ms / 1000)).toLocaleString('en-US')} msg/s, ${((used.user + used.system) / N).toFixed(2)} CPU µs/msg, heap ${heap.toFixed(1)} MB`,
);
await bus.stop();
