/**
 * What harrier/nestjs costs: send -> handle -> ack through `HarrierModule` in a Nest application,
 * next to the same Harrier bus made with `createBus` alone, and to @nestjs/cqrs's EventBus.
 *
 * Measured, in messages per second (median of {@link ROUNDS} rounds, each on a fresh bus or Nest
 * application context, after {@link WARM_UP} warm-up messages; rounds go across all rows so drift
 * spreads over every row):
 *
 * - Harrier standalone: `createBus` with the default `InMemoryBroker`, concurrency 16, one producer
 *   awaiting each `send`, timed from the first send until the `onHandled` hook (after the ack) has
 *   counted N; once with the default (a new handler instance per message, from inversify) and once
 *   with `messageScope.handlerInstances: 'reuse'` (one instance for every message).
 * - harrier/nestjs: the same bus options through `HarrierModule.forRoot`, the same handler class a
 *   Nest provider; once default-scoped (Nest's one instance for every message, so its standalone
 *   twin is the `'reuse'` row) and once `Scope.REQUEST` (a Nest context and a new instance per
 *   message, next to the standalone default row).
 * - NestJS CQRS: `EventBus.publish` -> `@EventsHandler` counting N, the nearest NestJS equivalent
 *   (in-process, no queue, no ack, no validation).
 *
 * The adapter's cost is the Nest row against its standalone twin (same handler lifetime), paired
 * round by round: by rate, and by the process's CPU time per message, which moves less than the rate
 * on a shared host and decides the verdict. The target is a cost of at most 10 %.
 *
 * Run: `npm run bench:nestjs` (compiles src/ and bench/ into .bench/ and runs the JavaScript there);
 * BENCH_N sets N (default 20000), BENCH_ROUNDS the rounds (default 5).
 */
import 'reflect-metadata';
import { cpus, hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setImmediate as macrotask } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Injectable, Module, Scope, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { CqrsModule, EventBus, EventsHandler, type IEventHandler } from '@nestjs/cqrs';
import {
  CommandHandler,
  HarrierTokens,
  createBus,
  silentLogger,
  type BusOptions,
  type HandlesCommand,
  type MessageBus,
  type PayloadOf,
} from '../src/index.js';
import { HarrierModule } from '../src/nestjs/index.js';
import { PlaceOrder, PlaceOrderHandler, payloadOf } from './place-order.js';
import { Counter, fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARM_UP = 2_000;
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 60_000;
/** The most the adapter may cost against its standalone twin. */
const TARGET_COST = 0.1;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Ends the current job and collects, so one run's garbage does not slow the next. */
async function settle(): Promise<void> {
  await macrotask();
  gc();
}

/** The options every Harrier row shares: only how the handler is made differs. */
function busOptions(handled: Counter): BusOptions {
  return {
    endpoint: 'bench',
    concurrency: 16,
    logger: silentLogger,
    hooks: {
      onHandled: () => {
        handled.hit();
      },
    },
  };
}

/** What one run measured. */
interface Sample {
  readonly perSecond: number;
  /** CPU time of the process (user + system) per message, in µs: it moves less than the rate on a shared host. */
  readonly cpuUs: number;
}

/** Times `work` (N messages): its rate, and the process's CPU time per message. */
async function timed(work: () => Promise<void>): Promise<Sample> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  await work();
  const elapsed = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return { perSecond: N / (elapsed / 1000), cpuUs: (used.user + used.system) / N };
}

/** Sends WARM_UP then N messages, one awaited after another; measures the N. */
async function sendRate(bus: MessageBus, handled: Counter): Promise<Sample> {
  const sendAll = async (from: number, count: number): Promise<void> => {
    const target = handled.count + count;
    for (let i = from; i < from + count; i++) await bus.send(PlaceOrder, payloadOf(i));
    await handled.until(target);
  };
  await sendAll(0, WARM_UP);
  return timed(() => sendAll(WARM_UP, N));
}

// ---------------------------------------------------------------- Harrier standalone

async function standalone(handlerInstances: 'fresh' | 'reuse'): Promise<Sample> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  const bus = createBus({
    ...busOptions(handled),
    handlers: [PlaceOrderHandler],
    ...(handlerInstances === 'reuse' ? { messageScope: { handlerInstances } } : {}),
  });
  await bus.start();
  try {
    return await sendRate(bus, handled);
  } finally {
    await bus.stop();
  }
}

// ---------------------------------------------------------------- harrier/nestjs

/** The bench handler, made by Nest for every message. */
@Injectable({ scope: Scope.REQUEST })
@CommandHandler(PlaceOrder)
class RequestScopedPlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(payload: PayloadOf<typeof PlaceOrder>): void {
    if (payload.amount <= 0) throw new Error('unreachable');
  }
}

async function nestContext(module: new () => object): Promise<INestApplicationContext> {
  // Nest types its options as a class with only optional fields; its documented call is a literal.
  // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
  return NestFactory.createApplicationContext(module, { logger: false });
}

async function throughNest(scope: 'default' | 'request'): Promise<Sample> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  @Module({
    imports: [HarrierModule.forRoot(busOptions(handled))],
    providers: [scope === 'default' ? PlaceOrderHandler : RequestScopedPlaceOrderHandler],
  })
  class BenchApp {}
  const app = await nestContext(BenchApp);
  try {
    return await sendRate(app.get<MessageBus>(HarrierTokens.MessageBus), handled);
  } finally {
    await app.close();
  }
}

// ---------------------------------------------------------------- NestJS CQRS

class NestOrderPlaced {
  constructor(
    readonly orderId: string,
    readonly amount: number,
  ) {}
}

/** Where the Nest event handler (a Nest-made singleton) reports to the current run. */
const nestEvents = { handled: new Counter(RUN_TIMEOUT_MS) };

@EventsHandler(NestOrderPlaced)
class NestOrderPlacedHandler implements IEventHandler<NestOrderPlaced> {
  handle(event: NestOrderPlaced): void {
    if (event.amount > 0) nestEvents.handled.hit();
  }
}

@Module({ imports: [CqrsModule.forRoot()], providers: [NestOrderPlacedHandler] })
class CqrsApp {}

async function nestCqrsPublish(): Promise<Sample> {
  const app = await nestContext(CqrsApp);
  try {
    const events = app.get(EventBus);
    nestEvents.handled = new Counter(RUN_TIMEOUT_MS);
    const handled = nestEvents.handled;
    const publishAll = async (from: number, count: number): Promise<void> => {
      const target = handled.count + count;
      for (let i = from; i < from + count; i++) events.publish(new NestOrderPlaced(`o-${i}`, 1 + (i % 10)));
      await handled.until(target);
    };
    await publishAll(0, WARM_UP);
    return await timed(() => publishAll(WARM_UP, N));
  } finally {
    await app.close();
  }
}

// ---------------------------------------------------------------- table

interface Row {
  readonly workload: string;
  readonly run: () => Promise<Sample>;
  /** The row it is compared with for the adapter's cost (same handler lifetime). */
  readonly twin?: number;
}

const rows: readonly Row[] = [
  { workload: 'Harrier createBus, new handler per message (default)', run: () => standalone('fresh') },
  { workload: "Harrier createBus, one handler instance ('reuse')", run: () => standalone('reuse') },
  {
    workload: 'harrier/nestjs, default-scoped handler (one instance)',
    run: () => throughNest('default'),
    twin: 1,
  },
  {
    workload: 'harrier/nestjs, Scope.REQUEST handler (per message)',
    run: () => throughNest('request'),
    twin: 0,
  },
  { workload: '@nestjs/cqrs EventBus.publish -> @EventsHandler', run: nestCqrsPublish },
];

async function main(): Promise<void> {
  const model = cpus()[0]?.model ?? 'unknown CPU';
  console.log(
    `harrier/nestjs benchmark — ${new Date().toISOString().slice(0, 10)}, ${hostname()} (${model}, ${cpus().length} cores), Node ${process.version}`,
  );
  console.log(
    `send -> handle -> ack, in memory, c=16; N = ${N} after ${WARM_UP} warm-up; median of ${ROUNDS} rounds\n`,
  );

  const samples: Sample[][] = rows.map(() => []);
  const began = performance.now();
  for (let round = 0; round < ROUNDS; round++) {
    for (const [r, row] of rows.entries()) {
      samples[r]?.push(await row.run());
      await settle();
    }
  }

  const rate = (r: number): number => median((samples[r] ?? []).map((s) => s.perSecond));
  const cpu = (r: number): number => median((samples[r] ?? []).map((s) => s.cpuUs));
  /** Row `r` against row `twin`, round by round (they ran back to back), then the median: drift cancels out. */
  const paired = (r: number, twin: number, of: (s: Sample) => number): number =>
    median((samples[r] ?? []).map((s, i) => of(s) / of(samples[twin]?.[i] ?? s)));
  const cqrs = rows.length - 1;
  const verdicts: string[] = [];
  const body = rows.map((row, r) => {
    const twin = row.twin;
    let byRate = '';
    let byCpu = '';
    if (twin !== undefined) {
      const rateRatio = paired(r, twin, (s) => s.perSecond);
      // CPU per message of the twin over this row's: above 1 means this row spends more.
      const cpuRatio = 1 / paired(r, twin, (s) => s.cpuUs);
      byRate = `${rateRatio.toFixed(3)}x`;
      byCpu = `${cpuRatio.toFixed(3)}x`;
      const costByCpu = 1 - cpuRatio;
      const costByRate = 1 - rateRatio;
      verdicts.push(
        `row ${r + 1} against row ${twin + 1}: costs ${(costByCpu * 100).toFixed(1)} % by CPU per message, ${(costByRate * 100).toFixed(1)} % by rate — target <= ${TARGET_COST * 100} %: ${costByCpu <= TARGET_COST ? 'met' : 'NOT met'} (by CPU)`,
      );
    }
    return [
      `${r + 1}. ${row.workload}`,
      fmtRate(rate(r)),
      cpu(r).toFixed(1),
      twin === undefined ? '' : `row ${twin + 1}`,
      byRate,
      byCpu,
      `${(rate(r) / rate(cqrs)).toFixed(2)}x`,
    ];
  });
  console.log(
    table(
      ['workload', 'msg/s', 'CPU µs/msg', 'twin', 'rate vs twin', 'CPU vs twin', 'rate vs @nestjs/cqrs'],
      body,
    ),
  );
  console.log(
    "\n(vs twin: paired by round, medians; CPU vs twin is the twin's CPU per message over this row's.)",
  );
  for (const verdict of verdicts) console.log(verdict);

  console.log('\nEvery round (msg/s / CPU µs per message):');
  console.log(
    table(
      ['row', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)],
      rows.map((row, r) => [
        `${r + 1}. ${row.workload}`,
        ...(samples[r] ?? []).map((s) => `${fmtRate(s.perSecond)} / ${s.cpuUs.toFixed(1)}`),
      ]),
    ),
  );
  console.log(`\nTotal ${((performance.now() - began) / 1000).toFixed(1)} s`);
}

await main();
