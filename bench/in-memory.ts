/**
 * In-process throughput of Harrier on the in-memory broker, next to the same workloads on @nestjs/cqrs.
 *
 * Measured, in messages per second (median of {@link ROUNDS} rounds, each on a fresh bus / Nest
 * application context, after {@link WARM_UP} warm-up messages, {@link EXECUTE_WARM_UP} for the
 * execute rows):
 *
 * - Harrier `send` -> handle -> ack: `createBus` with the default `InMemoryBroker`, the system clock
 *   and the default concurrency (16); one producer awaits each `send`; timed from the first send until
 *   the `onHandled` hook (which fires after the ack) has counted N messages.
 * - Harrier `execute`: the command handler run in-process, awaited one after another, and from 16
 *   concurrent callers; {@link EXECUTE_N} calls per run (a call is well under a microsecond).
 * - NestJS CQRS: `CommandBus.execute` of a `@CommandHandler` (sequential and 16 concurrent callers),
 *   and `EventBus.publish` -> `@EventsHandler` counting N, the nearest NestJS equivalent of
 *   send -> handle (fire-and-forget, in-process, no queue, no ack). Nest handlers are singletons by
 *   default, while Harrier resolves a new handler instance per message from a child container, so
 *   one more row runs the sequential execute against a `Scope.REQUEST` Nest handler (a new instance
 *   per command), the closest DI equivalent. Harrier validates each payload against its zod schema
 *   and Nest does not, so the fair rows run the Nest handler with the same `schema.parse` first.
 *
 * Harrier rows also show the heap used right after the run, and after the run's job ended and a forced
 * GC (bus still alive): the difference is what a burst holds on to while it runs. The ratio column
 * is Harrier / NestJS: below 1 means Harrier is slower.
 *
 * Run: `npm run bench:in-memory` (it compiles src/ and bench/ with tsc into .bench/, then runs
 * `node .bench/bench/in-memory.js`, so what is measured is the same JavaScript as the published
 * build, not TypeScript run through a loader). It takes under a minute, most of it in the Harrier
 * rows; set BENCH_N to change N (default 20000), BENCH_FLAT=1 to add the send row at N = 200,000, and
 * BENCH_ROWS=send to run the send rows alone (BENCH_SEND_WARM_UP and BENCH_TIMELINE: see below).
 */
import 'reflect-metadata';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setImmediate as macrotask } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Module, Scope } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  Command,
  CommandBus,
  CommandHandler as NestCommandHandler,
  CqrsModule,
  EventBus,
  EventsHandler,
  type ICommandHandler,
  type IEventHandler,
} from '@nestjs/cqrs';
import { InMemoryBroker, createBus, silentLogger, type MessageBus } from '../src/index.js';
import { NestValidatedPlaceOrder, NestValidatedPlaceOrderHandler } from './nest-place-order.js';
import { PlaceOrder, PlaceOrderHandler, payloadOf, placeOrderBus } from './place-order.js';
import { Counter, drive, fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
/**
 * BENCH_FLAT=1 runs the send row a second time at N = 200,000 (or BENCH_FLAT=<n>), to show whether
 * rate and heap stay flat as a run grows.
 */
const FLAT_N =
  process.env.BENCH_FLAT === undefined || process.env.BENCH_FLAT === ''
    ? undefined
    : process.env.BENCH_FLAT === '1'
      ? 200_000
      : Number(process.env.BENCH_FLAT);
/** BENCH_ROWS=send runs only the send rows (a short run for before/after comparisons). */
const ONLY_SEND = process.env.BENCH_ROWS === 'send';
const WARM_UP = 2_000;
/**
 * Warm-up messages of the send rows, both sides: BENCH_SEND_WARM_UP=<n> (default {@link WARM_UP}), to
 * check whether a longer warm-up moves the ratio.
 */
const SEND_WARM_UP = Number(process.env.BENCH_SEND_WARM_UP ?? WARM_UP);
/**
 * BENCH_TIMELINE=1 prints the time of each tenth of every Harrier send round (each tenth awaited
 * before the next, so the round's figure includes those waits): where a slow round loses its time.
 * Run with --trace-opt / --trace-gc to line the tenths up with compilations and collections.
 */
const TIMELINE = process.env.BENCH_TIMELINE === '1';
/**
 * Warm-up of the execute rows, both sides: a call costs well under a microsecond, so 2,000 calls end
 * before V8 has optimised the path, and each round starts on a fresh bus (docs/benchmarks.md).
 */
const EXECUTE_WARM_UP = 50_000;
/**
 * Calls timed per execute row (BENCH_EXECUTE_N, default the larger of N and 200,000). At N = 20,000
 * a row lasted 6 to 9 ms, so one scheduling hiccup moved a ratio by a third between runs of the
 * same code (fair row, 1 caller: 1.44x, 0.87x and 0.84x in three runs; docs/benchmarks.md).
 */
const EXECUTE_N = Number(process.env.BENCH_EXECUTE_N ?? Math.max(N, 200_000));
const ROUNDS = 3;
const CALLERS = 16;
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 30_000;

// The retained-heap column needs a full collection, and the npm script runs `node` without
// --expose-gc (so `node .bench/bench/in-memory.js` works as it is), so the flag is switched on here.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

// ---------------------------------------------------------------- Harrier

interface Sample {
  readonly perSecond: number;
  /** Heap used right after the run, and after a forced GC, in MB (Harrier only). */
  readonly heapMb?: { readonly end: number; readonly retained: number };
}

const mb = (bytes: number): number => bytes / (1024 * 1024);

async function heapNow(): Promise<{ end: number; retained: number }> {
  const end = mb(process.memoryUsage().heapUsed);
  await macrotask();
  gc();
  return { end, retained: mb(process.memoryUsage().heapUsed) };
}

/** Ends the current job and collects, so one run's garbage does not slow the next. */
async function settle(): Promise<void> {
  await macrotask();
  gc();
}

async function timed(work: () => Promise<void>, n = N): Promise<number> {
  const started = performance.now();
  await work();
  return n / ((performance.now() - started) / 1000);
}

async function harrierSend(n = N): Promise<Sample> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  const bus = placeOrderBus(new InMemoryBroker(), 16, () => {
    handled.hit();
  });
  await bus.start();
  try {
    const sendAll = async (from: number, count: number): Promise<void> => {
      const target = handled.count + count;
      for (let i = from; i < from + count; i++) await bus.send(PlaceOrder, payloadOf(i));
      await handled.until(target);
    };
    await sendAll(0, SEND_WARM_UP);
    const tenths: number[] = [];
    const perSecond = await timed(async () => {
      if (!TIMELINE) return sendAll(SEND_WARM_UP, n);
      for (let tenth = 0; tenth < 10; tenth++) {
        const from = SEND_WARM_UP + Math.floor((n * tenth) / 10);
        const started = performance.now();
        await sendAll(from, SEND_WARM_UP + Math.floor((n * (tenth + 1)) / 10) - from);
        tenths.push(performance.now() - started);
      }
    }, n);
    if (TIMELINE)
      console.error(`timeline send N = ${n}: ms per tenth ${tenths.map((ms) => ms.toFixed(1)).join(' ')}`);
    return { perSecond, heapMb: await heapNow() };
  } finally {
    await bus.stop();
  }
}

async function harrierExecute(callers: number): Promise<Sample> {
  const bus: MessageBus = createBus({ logger: silentLogger, handlers: [PlaceOrderHandler] });
  await bus.start();
  try {
    const execute = (i: number): Promise<unknown> => bus.execute(PlaceOrder, payloadOf(i));
    await drive(0, EXECUTE_WARM_UP, callers, execute);
    const perSecond = await timed(() => drive(0, EXECUTE_N, callers, execute), EXECUTE_N);
    return { perSecond, heapMb: await heapNow() };
  } finally {
    await bus.stop();
  }
}

// ---------------------------------------------------------------- NestJS CQRS

class NestPlaceOrder extends Command<{ accepted: boolean }> {
  constructor(
    readonly orderId: string,
    readonly amount: number,
  ) {
    super();
  }
}

class NestOrderPlaced {
  constructor(
    readonly orderId: string,
    readonly amount: number,
  ) {}
}

/** Where the Nest event handler (a Nest-made singleton) reports to the current run. */
const nestEvents = { handled: new Counter(RUN_TIMEOUT_MS) };

@NestCommandHandler(NestPlaceOrder)
class NestPlaceOrderHandler implements ICommandHandler<NestPlaceOrder> {
  execute(command: NestPlaceOrder): Promise<{ accepted: boolean }> {
    return Promise.resolve({ accepted: command.amount > 0 });
  }
}

/** The same handler with a new instance per command, as Harrier makes one per message. */
class NestScopedPlaceOrder extends Command<{ accepted: boolean }> {
  constructor(
    readonly orderId: string,
    readonly amount: number,
  ) {
    super();
  }
}

@NestCommandHandler(NestScopedPlaceOrder, { scope: Scope.REQUEST })
class NestScopedPlaceOrderHandler implements ICommandHandler<NestScopedPlaceOrder> {
  execute(command: NestScopedPlaceOrder): Promise<{ accepted: boolean }> {
    return Promise.resolve({ accepted: command.amount > 0 });
  }
}

@EventsHandler(NestOrderPlaced)
class NestOrderPlacedHandler implements IEventHandler<NestOrderPlaced> {
  handle(event: NestOrderPlaced): void {
    if (event.amount > 0) nestEvents.handled.hit();
  }
}

@Module({
  imports: [CqrsModule.forRoot()],
  providers: [
    NestPlaceOrderHandler,
    NestScopedPlaceOrderHandler,
    NestValidatedPlaceOrderHandler,
    NestOrderPlacedHandler,
  ],
})
class AppModule {}

async function withNest<T>(work: (commands: CommandBus, events: EventBus) => Promise<T>): Promise<T> {
  // Nest types its options as a class with only optional fields; its documented call is a literal.
  // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  try {
    return await work(app.get(CommandBus), app.get(EventBus));
  } finally {
    await app.close();
  }
}

/** Which Nest command handler a run executes (see the classes above). */
type NestHandler = 'singleton' | 'request-scoped' | 'validated';

const nestCommand: Record<NestHandler, (i: number) => Command<{ accepted: boolean }>> = {
  singleton: (i) => new NestPlaceOrder(`o-${i}`, 1 + (i % 10)),
  'request-scoped': (i) => new NestScopedPlaceOrder(`o-${i}`, 1 + (i % 10)),
  validated: (i) => new NestValidatedPlaceOrder(`o-${i}`, 1 + (i % 10)),
};

function nestExecute(callers: number, handler: NestHandler = 'singleton'): Promise<Sample> {
  return withNest(async (commands) => {
    const make = nestCommand[handler];
    const execute = (i: number): Promise<{ accepted: boolean }> => commands.execute(make(i));
    await drive(0, EXECUTE_WARM_UP, callers, execute);
    return { perSecond: await timed(() => drive(0, EXECUTE_N, callers, execute), EXECUTE_N) };
  });
}

function nestPublish(n = N): Promise<Sample> {
  return withNest(async (_commands, events) => {
    nestEvents.handled = new Counter(RUN_TIMEOUT_MS);
    const handled = nestEvents.handled;
    const publishAll = async (from: number, count: number): Promise<void> => {
      const target = handled.count + count;
      for (let i = from; i < from + count; i++) events.publish(new NestOrderPlaced(`o-${i}`, 1 + (i % 10)));
      await handled.until(target);
    };
    await publishAll(0, SEND_WARM_UP);
    return { perSecond: await timed(() => publishAll(SEND_WARM_UP, n), n) };
  });
}

// ---------------------------------------------------------------- table

interface Row {
  readonly workload: string;
  /** Measures Harrier, or names the row whose Harrier samples this row compares against. */
  readonly harrier: (() => Promise<Sample>) | number;
  readonly nest: () => Promise<Sample>;
}

const sendRow = (n: number): Row => ({
  workload: `send -> handle -> ack (c=16), N = ${n.toLocaleString('en-US')} | EventBus.publish -> handler`,
  harrier: () => harrierSend(n),
  nest: () => nestPublish(n),
});

/** How many send rows lead the table (the execute rows that reuse samples count from there). */
const SEND_ROWS = FLAT_N === undefined ? 1 : 2;

const allRows: readonly Row[] = [
  sendRow(N),
  ...(FLAT_N === undefined ? [] : [sendRow(FLAT_N)]),
  {
    workload: 'execute, 1 caller (sequential)',
    harrier: () => harrierExecute(1),
    nest: () => nestExecute(1),
  },
  {
    workload: `execute, ${CALLERS} concurrent callers`,
    harrier: () => harrierExecute(CALLERS),
    nest: () => nestExecute(CALLERS),
  },
  {
    workload: 'execute, 1 caller | Nest handler in Scope.REQUEST',
    harrier: SEND_ROWS,
    nest: () => nestExecute(1, 'request-scoped'),
  },
  {
    workload: 'execute, 1 caller | Nest handler runs schema.parse (fair)',
    harrier: SEND_ROWS,
    nest: () => nestExecute(1, 'validated'),
  },
  {
    workload: `execute, ${CALLERS} callers | Nest handler runs schema.parse (fair)`,
    harrier: SEND_ROWS + 1,
    nest: () => nestExecute(CALLERS, 'validated'),
  },
];

const rows = ONLY_SEND ? allRows.slice(0, SEND_ROWS) : allRows;

const fmtMb = (n: number): string => n.toFixed(1);

async function main(): Promise<void> {
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  console.log(
    `Harrier in-memory benchmark — Node ${process.version} (${process.platform}/${process.arch}, ${cpu})`,
  );
  console.log(
    `N = ${N} messages per run after ${SEND_WARM_UP} warm-up; execute rows ${EXECUTE_N} calls after ${EXECUTE_WARM_UP} warm-up; median of ${ROUNDS} rounds\n`,
  );

  const harrier: Sample[][] = rows.map(() => []);
  const nest: Sample[][] = rows.map(() => []);
  const began = performance.now();
  // Rounds go across all rows so drift (JIT, heap growth, thermal) spreads over every workload.
  for (let round = 0; round < ROUNDS; round++) {
    for (const [r, row] of rows.entries()) {
      if (typeof row.harrier === 'function') {
        harrier[r]?.push(await row.harrier());
        await settle();
      }
      nest[r]?.push(await row.nest());
      await settle();
    }
  }

  const harrierOf = (r: number): Sample[] => {
    const source = rows[r]?.harrier;
    return (typeof source === 'number' ? harrier[source] : harrier[r]) ?? [];
  };
  const body = rows.map((row, r) => {
    const h = harrierOf(r);
    const n = nest[r] ?? [];
    const hRate = median(h.map((s) => s.perSecond));
    const nRate = median(n.map((s) => s.perSecond));
    return [
      row.workload,
      fmtRate(hRate),
      fmtRate(nRate),
      `${(hRate / nRate).toFixed(3)}x`,
      // A row that reuses another row's Harrier samples leaves their heap to that row.
      typeof row.harrier === 'number' ? '' : fmtMb(median(h.map((s) => s.heapMb?.end ?? Number.NaN))),
      typeof row.harrier === 'number' ? '' : fmtMb(median(h.map((s) => s.heapMb?.retained ?? Number.NaN))),
    ];
  });
  console.log(
    table(
      [
        'workload (Harrier | NestJS CQRS)',
        'Harrier msg/s',
        'NestJS msg/s',
        'Harrier/NestJS',
        'heap MB',
        'after GC MB',
      ],
      body,
    ),
  );

  console.log('\nEvery round (msg/s; Harrier heap MB at the end of the run / after GC):');
  const detail = rows.flatMap((row, r) => [
    ...(typeof row.harrier === 'number'
      ? []
      : [
          [
            `Harrier  ${row.workload}`,
            ...harrierOf(r).map(
              (s) =>
                `${fmtRate(s.perSecond)} (${fmtMb(s.heapMb?.end ?? 0)}/${fmtMb(s.heapMb?.retained ?? 0)})`,
            ),
          ],
        ]),
    [`NestJS   ${row.workload}`, ...(nest[r] ?? []).map((s) => fmtRate(s.perSecond))],
  ]);
  console.log(table(['run', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)], detail));
  console.log(`\nTotal ${((performance.now() - began) / 1000).toFixed(1)} s`);
}

await main();
