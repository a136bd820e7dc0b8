/**
 * CPU time per in-process call: Harrier `execute` next to NestJS CQRS `CommandBus.execute` with the
 * fair handler (it runs the same zod `schema.parse` Harrier runs on every payload), in steady state.
 *
 * Each round makes a fresh bus / Nest application context per system and runs {@link WARM_UP} calls
 * on each, then measures N calls of each by `process.cpuUsage()` (user + system, so a busy neighbour
 * on a shared host costs wall time but not this figure) and by wall time. The N calls are cut into
 * {@link SLICES} slices taken in turn across the systems, so a host that slows down in the middle of
 * a round slows every system alike. The table shows the median of {@link ROUNDS} rounds, for 1 caller
 * awaiting each call and for 16 concurrent callers. The ratio is
 * NestJS CPU / Harrier CPU: above 1 means Harrier spends less CPU per call. BENCH_REUSE=1 adds rows
 * that run Harrier with `messageScope.handlerInstances: 'reuse'` (off by default: it gives up a fresh
 * handler instance per message; see docs/dependency-injection.md).
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
import { Counter, drive, fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARM_UP = 50_000;
const CALLERS = [1, 16] as const;
const SEND_FIRST = Number(process.env.BENCH_SEND_FIRST ?? 0);
/** Slices each system's N calls of a round are cut into, taken in turn with the other systems'. */
const SLICES = 20;

@Module({ imports: [CqrsModule.forRoot()], providers: [NestValidatedPlaceOrderHandler] })
class AppModule {}

/** One measured run: CPU µs and wall ns per call. */
interface Sample {
  readonly cpuUs: number;
  readonly wallNs: number;
}

/** One system under test, open for a round: its call, and how to close it. */
interface Open {
  readonly call: (i: number) => Promise<unknown>;
  readonly close: () => Promise<void>;
}

async function openHarrier(reuse: boolean): Promise<Open> {
  const bus: MessageBus = createBus({
    logger: silentLogger,
    handlers: [PlaceOrderHandler],
    ...(reuse ? { messageScope: { handlerInstances: 'reuse' } } : {}),
  });
  await bus.start();
  return { call: (i) => bus.execute(PlaceOrder, payloadOf(i)), close: () => bus.stop() };
}

async function openNest(): Promise<Open> {
  // Nest types its options as a class with only optional fields; its documented call is a literal.
  // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  const commands = app.get(CommandBus);
  return {
    call: (i) => commands.execute(new NestValidatedPlaceOrder(`o-${i}`, 1 + (i % 10))),
    close: () => app.close(),
  };
}

const runs = {
  harrier: () => openHarrier(false),
  'harrier reuse': () => openHarrier(true),
  'nest (fair)': openNest,
} as const;
type RunName = keyof typeof runs;
/**
 * The `reuse` system only with BENCH_REUSE=1: its slices run through the same container invoker as
 * the default bus's, so V8's feedback there mixes both modes, which no real process (one bus, one
 * mode) does; the default row was 0.88x-1.06x with it and 0.95x-1.13x without, in the same hour.
 */
const names = (Object.keys(runs) as RunName[]).filter(
  (name) => name !== 'harrier reuse' || process.env.BENCH_REUSE === '1',
);

/**
 * One round: every system opened and warmed up, then N calls each, in {@link SLICES} slices taken
 * in turn (system A's slice, B's, C's, then A's next), so a change in the host's speed during the
 * round falls on every system alike. Returns each system's CPU µs and wall ns per call.
 */
async function round(callers: number): Promise<Map<RunName, Sample>> {
  const open = new Map<RunName, Open>();
  try {
    for (const name of names) open.set(name, await runs[name]());
    for (const [, system] of open) await drive(0, WARM_UP, callers, system.call);
    const cpuUs = new Map<RunName, number>(names.map((name) => [name, 0]));
    const wallMs = new Map<RunName, number>(names.map((name) => [name, 0]));
    const slice = Math.ceil(N / SLICES);
    for (let from = 0; from < N; from += slice) {
      for (const [name, system] of open) {
        const started = performance.now();
        const cpu = process.cpuUsage();
        await drive(from, Math.min(slice, N - from), callers, system.call);
        const used = process.cpuUsage(cpu);
        wallMs.set(name, (wallMs.get(name) ?? 0) + performance.now() - started);
        cpuUs.set(name, (cpuUs.get(name) ?? 0) + used.user + used.system);
      }
    }
    return new Map(
      names.map((name) => [
        name,
        { cpuUs: (cpuUs.get(name) ?? 0) / N, wallNs: ((wallMs.get(name) ?? 0) * 1e6) / N },
      ]),
    );
  } finally {
    for (const [, system] of open) await system.close();
  }
}

/** Sends `n` messages through a bus on the in-memory broker and waits until all are handled. */
async function sendThrough(n: number): Promise<void> {
  const handled = new Counter(120_000);
  const bus = placeOrderBus(new InMemoryBroker(), 16, () => {
    handled.hit();
  });
  await bus.start();
  try {
    for (let i = 0; i < n; i++) await bus.send(PlaceOrder, payloadOf(i));
    await handled.until(n);
  } finally {
    await bus.stop();
  }
}

if (SEND_FIRST > 0) await sendThrough(SEND_FIRST);

const body: string[][] = [];
for (const callers of CALLERS) {
  const samples = new Map<RunName, Sample[]>(names.map((name) => [name, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, sample] of await round(callers)) samples.get(name)?.push(sample);
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
