/**
 * A minimal loop of Harrier `execute` calls for a CPU profile, with none of the bench's Nest rows in it:
 * `npm run bench:build && node --cpu-prof --cpu-prof-dir /tmp/prof .bench/bench/profile-execute.js`,
 * then read the profile's self time (Chrome DevTools, or any .cpuprofile reader). BENCH_N sets the
 * number of calls (default 200000), BENCH_CALLERS the concurrent callers (default 1).
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { createBus, silentLogger } from '../src/index.js';
import { PlaceOrder, PlaceOrderHandler, payloadOf } from './place-order.js';

const N = Number(process.env.BENCH_N ?? 200_000);
const CALLERS = Number(process.env.BENCH_CALLERS ?? 1);

const bus = createBus({ logger: silentLogger, handlers: [PlaceOrderHandler] });
await bus.start();
let next = 0;
const caller = async (): Promise<void> => {
  while (next < N) {
    const i = next++;
    await bus.execute(PlaceOrder, payloadOf(i));
  }
};
const started = performance.now();
await Promise.all(Array.from({ length: CALLERS }, caller));
const ms = performance.now() - started;
console.log(
  `${N} execute calls, ${CALLERS} caller(s): ${Math.round(N / (ms / 1000)).toLocaleString('en-US')} msg/s`,
);
await bus.stop();
