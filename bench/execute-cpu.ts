/**
 * CPU time per in-process call: Harrier `execute` next to NestJS CQRS `CommandBus.execute` with the
 * fair handler (it runs the same zod `schema.parse` Harrier runs on every payload), in steady state.
 *
 * Each round makes a fresh bus / Nest application context, runs {@link WARM_UP} calls, then measures
 * N calls by `process.cpuUsage()` (user + system, so a busy neighbour on a shared host costs wall time
 * but not this figure) and by wall time. Rows alternate within a round; the table shows the median of
 * {@link ROUNDS} rounds, for 1 caller awaiting each call and for 16 concurrent callers. The ratio is
 * NestJS CPU / Harrier CPU: above 1 means Harrier spends less CPU per call. The `reuse` rows run
 * Harrier with `messageScope.handlerInstances: 'reuse'` (off by default: it gives up a fresh handler
 * instance per message; see docs/dependency-injection.md).
 *
 * Run: `npm run bench:execute-cpu`; BENCH_N sets N (default 200000), BENCH_ROUNDS the rounds
 * (default 5). BENCH_SEND_FIRST=n first sends n messages through a bus on the in-memory broker (the
 * receive path), as a service that both receives and executes would, so the code both paths share
 * is no longer specialised for `execute` alone when the rows run.
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { CommandBus, CqrsModule } from '@nestjs/cqrs';
import { InMemoryBroker, createBus, silentLogger, type MessageBus } from '../src/index.js';
import { NestValidatedPlaceOrder, NestValidatedPlaceOrderHandler } from './nest-place-order.js';
import { PlaceOrder, PlaceOrderHandler, payloadOf, placeOrderBus } from './place-order.js';
import { fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARM_UP = 50_000;
const CALLERS = [1, 16] as const;
const SEND_FIRST = Number(process.env.BENCH_SEND_FIRST ?? 0);

@Module({ imports: [CqrsModule.forRoot()], providers: [NestValidatedPlaceOrderHandler] })
class AppModule {}

/** One measured run: CPU µs and wall ns per call. */
interface Sample {
  readonly cpuUs: number;
  readonly wallNs: number;
}

async function drive(count: number, callers: number, call: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  const caller = async (): Promise<void> => {
    while (next < count) await call(next++);
  };
  await Promise.all(Array.from({ length: callers }, caller));
}

/** Warms `call` up, then measures N calls of it. */
async function measure(callers: number, call: (i: number) => Promise<unknown>): Promise<Sample> {
  await drive(WARM_UP, callers, call);
  const started = performance.now();
  const cpu = process.cpuUsage();
  await drive(N, callers, call);
  const used = process.cpuUsage(cpu);
  const ms = performance.now() - started;
  return { cpuUs: (used.user + used.system) / N, wallNs: (ms * 1e6) / N };
}

async function harrier(callers: number, reuse: boolean): Promise<Sample> {
  const bus: MessageBus = createBus({
    logger: silentLogger,
    handlers: [PlaceOrderHandler],
    ...(reuse ? { messageScope: { handlerInstances: 'reuse' } } : {}),
  });
  await bus.start();
  try {
    return await measure(callers, (i) => bus.execute(PlaceOrder, payloadOf(i)));
  } finally {
    await bus.stop();
  }
}

async function nest(callers: number): Promise<Sample> {
  // Nest types its options as a class with only optional fields; its documented call is a literal.
  // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  try {
    const commands = app.get(CommandBus);
    return await measure(callers, (i) =>
      commands.execute(new NestValidatedPlaceOrder(`o-${i}`, 1 + (i % 10))),
    );
  } finally {
    await app.close();
  }
}

const runs = {
  harrier: (callers: number) => harrier(callers, false),
  'harrier reuse': (callers: number) => harrier(callers, true),
  'nest (fair)': nest,
} as const;
type RunName = keyof typeof runs;
const names = Object.keys(runs) as RunName[];

/** Sends `n` messages through a bus on the in-memory broker and waits until all are handled. */
async function sendThrough(n: number): Promise<void> {
  let handled = 0;
  let done: () => void = () => undefined;
  const all = new Promise<void>((resolve) => {
    done = resolve;
  });
  const bus = placeOrderBus(new InMemoryBroker(), 16, () => {
    if (++handled === n) done();
  });
  await bus.start();
  try {
    for (let i = 0; i < n; i++) await bus.send(PlaceOrder, payloadOf(i));
    await all;
  } finally {
    await bus.stop();
  }
}

if (SEND_FIRST > 0) await sendThrough(SEND_FIRST);

const body: string[][] = [];
for (const callers of CALLERS) {
  const samples = new Map<RunName, Sample[]>(names.map((name) => [name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names) samples.get(name)?.push(await runs[name](callers));
  }
  const cpuOf = (name: RunName): number => median((samples.get(name) ?? []).map((s) => s.cpuUs));
  const wallOf = (name: RunName): number => median((samples.get(name) ?? []).map((s) => s.wallNs));
  const nestCpu = cpuOf('nest (fair)');
  for (const name of names) {
    body.push([
      `${name}, ${callers} caller${callers === 1 ? '' : 's'}`,
      cpuOf(name).toFixed(3),
      fmtRate(wallOf(name)),
      fmtRate(1e9 / wallOf(name)),
      name === 'nest (fair)' ? '' : `${(nestCpu / cpuOf(name)).toFixed(2)}x`,
    ]);
  }
}
console.log(
  `execute CPU per call, N = ${N.toLocaleString('en-US')}, median of ${ROUNDS} rounds after ${WARM_UP.toLocaleString('en-US')} warm-up calls${SEND_FIRST > 0 ? `, after ${SEND_FIRST.toLocaleString('en-US')} sends through the receive path` : ''}`,
);
console.log(table(['run', 'CPU µs/call', 'wall ns/call', 'calls/s', 'vs Nest (CPU)'], body));
