/**
 * What tracing costs: Harrier with `harrierTracing` (an OpenTelemetry SDK `BasicTracerProvider`, a
 * `BatchSpanProcessor` into an `InMemorySpanExporter`, and an `AsyncLocalStorageContextManager`)
 * next to the same work with no tracing at all, in one run.
 *
 * Measured, in messages per second (median of {@link ROUNDS} rounds; the two sides alternate within
 * each round and swap their order every round, so drift spreads over both):
 *
 * - Redis consume: as `bench/redis.ts`'s consume. A queue pre-filled with {@link N_REDIS} commands
 *   (each carrying the same traceparent, so the jobs are identical on both sides) on a fresh key
 *   prefix; timed from `bus.start()` (concurrency {@link CONCURRENCY}, a trivial `@CommandHandler`)
 *   until the `onHandled` hook, which fires after the ack, has counted them. Traced: one CONSUMER
 *   `process` span per message, linked to the producer span its traceparent names.
 * - in-memory send -> handle -> ack: as `bench/in-memory.ts`'s first row. The default
 *   `InMemoryBroker` and concurrency; one producer awaits each `send` of {@link N_MEMORY} commands,
 *   timed until `onHandled` has counted them. Traced: a PRODUCER `send` span and a CONSUMER `process`
 *   span per message.
 *
 * "No SDK" is `harrierTracing()` with no SDK registered (the global no-op provider): the cost an
 * application pays before it sets tracing up. After the table, "SDK alone" times the spans a
 * message makes with the same provider and no Harrier at all: the floor no change in Harrier can go
 * below.
 *
 * "Off" is a bus without `telemetry` and no context manager enabled; "on" enables the context
 * manager for the run (AsyncLocalStorage turns on Node's promise hooks, which costs every await in
 * the process, so it is part of what tracing costs) and disables it afterwards. After each traced run
 * the exporter is flushed, its span count checked (a dropped span would flatter the figure) and reset,
 * so memory does not grow from round to round. The table gives the medians of each side, the median
 * of the per-round ratios on/off (a pair shares the host's load of that moment), and the overhead,
 * 1 - that ratio: the share of throughput tracing takes. It also gives this process's CPU time per
 * message (all threads, `process.cpuUsage`), which varies less on a shared machine.
 *
 * Run: `npm run bench:telemetry` (compiled with tsc into .bench/, like the other benches). It starts
 * a redis-server of its own (no persistence, in a temp dir) unless REDIS_URL is set. BENCH_N sets the
 * Redis N (default 10000), BENCH_MEMORY_N the in-memory N (default 20000), BENCH_ROUNDS the rounds
 * (default 5). BENCH_ONLY=redis-on (or redis-off, memory-on, memory-off) runs that one alone, e.g.
 * under `node --cpu-prof .bench/bench/telemetry.js`.
 */
import 'reflect-metadata';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setImmediate as macrotask } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { SpanKind, context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, BatchSpanProcessor, InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { Redis } from 'ioredis';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type BusOptions,
  type HandlesCommand,
  type PayloadOf,
} from '../src/index.js';
import { BullMqBroker, describeRedisUrl } from '../src/redis/index.js';
import { harrierTracing } from '../src/telemetry/index.js';
import { startRedisServer, type LocalRedis } from '../test/helpers/local-redis.js';
import { produceWithHarrier } from './produce-support.js';
import { Counter, benchPrefix, deleteKeys, fmtRate, median, table } from './support.js';

function positiveInteger(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`${name} must be a positive whole number, got "${process.env[name] ?? ''}"`);
  }
  return value;
}

const N_REDIS = positiveInteger('BENCH_N', 10_000);
const N_MEMORY = positiveInteger('BENCH_MEMORY_N', 20_000);
const ROUNDS = positiveInteger('BENCH_ROUNDS', 5);
const WARM_UP = 2_000;
const CONCURRENCY = 16;
/** BENCH_ONLY=<path>-<side> runs one path on one side alone, to profile it. */
const ONLY = ((): { readonly path: 'redis' | 'memory'; readonly side: 'on' | 'off' } | undefined => {
  const only = process.env.BENCH_ONLY;
  if (only === undefined || only === '') return undefined;
  const match = /^(redis|memory)-(on|off)$/.exec(only);
  if (match === null) {
    throw new Error(`BENCH_ONLY must be redis-on, redis-off, memory-on or memory-off, got "${only}"`);
  }
  return { path: match[1] as 'redis' | 'memory', side: match[2] as 'on' | 'off' };
})();
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 180_000;
/** The traceparent every pre-filled Redis command carries: a producer span of some other process. */
const PRODUCER_TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

// A full collection between runs keeps one run's garbage out of the next; the npm script runs
// `node` without --expose-gc, so the flag is switched on here.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const PlaceOrder = defineCommand('bench.PlaceOrder', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
});

@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(payload: PayloadOf<typeof PlaceOrder>): void {
    if (payload.amount <= 0) throw new Error('unreachable');
  }
}

const payloadOf = (i: number): PayloadOf<typeof PlaceOrder> => ({ orderId: `o-${i}`, amount: 1 + (i % 10) });

// ---------------------------------------------------------------- tracing on / off

const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({
  spanProcessors: [
    // A queue that never fills within a run: a dropped span would be work not measured.
    new BatchSpanProcessor(exporter, { maxQueueSize: 1 << 20, maxExportBatchSize: 512 }),
  ],
});

/** What a bus gets for a side of the comparison, and what that side does around a run. */
interface Side {
  readonly name: 'off' | 'on' | 'noSdk' | 'offAls';
  readonly telemetry: Pick<BusOptions, 'telemetry'>;
  begin(): void;
  /** Ends the run; `spans` is how many spans it must have exported. */
  end(spans: number): Promise<void>;
}

const off: Side = {
  name: 'off',
  telemetry: {},
  begin: () => undefined,
  end: () => Promise.resolve(),
};

/**
 * Tracing off in an application that already has OpenTelemetry's context manager running (an SDK
 * with HTTP instrumentation, say): AsyncLocalStorage's hooks are on for every promise and socket
 * write whether Harrier traces or not, so "on" against this side is what Harrier's spans add there.
 */
const offAls: Side = {
  name: 'offAls',
  telemetry: {},
  begin: () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    // Entering a context once turns AsyncLocalStorage's hooks on, as any instrumentation does.
    context.with(context.active(), () => undefined);
  },
  end: () => {
    context.disable();
    return Promise.resolve();
  },
};

/** `harrierTracing()` with no SDK registered: what tracing costs an application that has not set one up. */
const noSdk: Side = {
  name: 'noSdk',
  telemetry: { telemetry: harrierTracing({ system: 'redis' }) },
  begin: () => undefined,
  end: () => Promise.resolve(),
};

const on: Side = {
  name: 'on',
  telemetry: { telemetry: harrierTracing({ tracerProvider, system: 'redis' }) },
  begin: () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  },
  end: async (spans) => {
    context.disable();
    await tracerProvider.forceFlush();
    const exported = exporter.getFinishedSpans().length;
    exporter.reset();
    if (exported !== spans) throw new Error(`The traced run exported ${exported} spans, not ${spans}`);
  },
};

// ---------------------------------------------------------------- runs

interface Sample {
  readonly perSecond: number;
  /** CPU time of this process (all threads) per message, in microseconds. */
  readonly cpuUs: number;
}

/** Times `work` (which handles `n` messages) on `side`; `spans` is what it must export when traced. */
async function measure(side: Side, n: number, spans: number, work: () => Promise<void>): Promise<Sample> {
  side.begin();
  let sample: Sample;
  try {
    const cpu = process.cpuUsage();
    const started = performance.now();
    await work();
    const ms = performance.now() - started;
    const used = process.cpuUsage(cpu);
    sample = { perSecond: n / (ms / 1000), cpuUs: (used.user + used.system) / n };
  } finally {
    await side.end(spans);
  }
  await macrotask();
  gc();
  return sample;
}

/** The Redis the bench runs on, and its own connection to it, which deletes each run's keys. */
let redisUrl = '';
let admin: Redis;

/** Registers PlaceOrder's route and fills its queue with `n` commands, untimed. */
async function prefill(prefix: string, n: number): Promise<void> {
  const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
  try {
    await broker.register('bench', [
      { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
    ]);
    await produceWithHarrier(broker, PlaceOrder, payloadOf, n, { traceparent: PRODUCER_TRACEPARENT });
  } finally {
    await broker.close();
  }
}

/** Redis consume: a pre-filled queue of `n` commands, timed from `bus.start()` until all are acked. */
async function redisConsume(side: Side, n = N_REDIS): Promise<Sample> {
  const prefix = benchPrefix('harrier-bench-otel');
  const handled = new Counter(RUN_TIMEOUT_MS);
  const bus = createBus({
    endpoint: 'bench',
    broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
    handlers: [PlaceOrderHandler],
    concurrency: CONCURRENCY,
    logger: silentLogger,
    hooks: {
      onHandled: () => {
        handled.hit();
      },
    },
    ...side.telemetry,
  });
  try {
    await prefill(prefix, n);
    return await measure(side, n, n, async () => {
      await bus.start();
      await handled.until(n);
    });
  } finally {
    await bus.stop();
    await deleteKeys(admin, prefix);
  }
}

/** In-memory send -> handle -> ack: one producer awaits each send; timed until all are acked. */
async function inMemorySend(side: Side, n = N_MEMORY): Promise<Sample> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  const bus = createBus({
    handlers: [PlaceOrderHandler],
    logger: silentLogger,
    hooks: {
      onHandled: () => {
        handled.hit();
      },
    },
    ...side.telemetry,
  });
  await bus.start();
  try {
    return await measure(side, n, 2 * n, async () => {
      for (let i = 0; i < n; i++) await bus.send(PlaceOrder, payloadOf(i));
      await handled.until(n);
    });
  } finally {
    await bus.stop();
  }
}

/**
 * The SDK's own cost per span, without Harrier: the spans a traced message makes (same attributes,
 * a link, made active for a call, ended), in a loop; CPU us per span, median of the rounds.
 */
async function sdkFloor(n = N_MEMORY): Promise<number> {
  const tracer = tracerProvider.getTracer('bench-floor');
  const link = {
    context: { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1 },
  };
  const perSpan: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    on.begin();
    const cpu = process.cpuUsage();
    try {
      for (let i = 0; i < n; i++) {
        const span = tracer.startSpan('process bench.PlaceOrder', {
          kind: SpanKind.CONSUMER,
          root: true,
          links: [link],
          attributes: {
            'messaging.system': 'redis',
            'messaging.destination.name': 'bench.PlaceOrder',
            'messaging.operation.name': 'process',
            'messaging.operation.type': 'process',
            'messaging.message.id': `id-${i}`,
            'messaging.message.conversation_id': `id-${i}`,
            'messaging.consumer.group.name': 'bench',
            'harrier.handler': 'PlaceOrderHandler',
            'harrier.handler.kind': 'command',
            'harrier.attempt': 1,
          },
        });
        await context.with(trace.setSpan(context.active(), span), () => Promise.resolve());
        span.end();
      }
    } finally {
      const used = process.cpuUsage(cpu);
      perSpan.push((used.user + used.system) / n);
      await on.end(n);
    }
    await macrotask();
    gc();
  }
  return median(perSpan);
}

// ---------------------------------------------------------------- table

interface Path {
  readonly key: 'redis' | 'memory';
  readonly name: string;
  readonly n: number;
  readonly run: (side: Side, n?: number) => Promise<Sample>;
}

const paths: readonly Path[] = [
  { key: 'redis', name: `Redis consume (c=${CONCURRENCY})`, n: N_REDIS, run: redisConsume },
  { key: 'memory', name: 'in-memory send -> handle -> ack', n: N_MEMORY, run: inMemorySend },
];

const fmtLoad = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const fmtRatio = (r: number): string => `${r.toFixed(3)}x`;
const fmtOverhead = (r: number): string => `${((1 - r) * 100).toFixed(1)}%`;

/** A redis-server of the bench's own, or REDIS_URL. */
async function startRedis(): Promise<LocalRedis> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') return { url: fromEnv, stop: () => undefined };
  return startRedisServer('harrier-bench-redis-');
}

/** One path on one side alone, for a profile (`node --cpu-prof`): no table, no ratio. */
async function runOnly(only: NonNullable<typeof ONLY>): Promise<void> {
  const path = paths.find((p) => p.key === only.path);
  const side = only.side === 'on' ? on : off;
  if (path === undefined) return;
  await path.run(side, WARM_UP);
  for (let round = 0; round < ROUNDS; round++) {
    const sample = await path.run(side);
    console.log(
      `${path.name}, tracing ${side.name}: ${fmtRate(sample.perSecond)} msg/s, CPU us/msg ${sample.cpuUs.toFixed(1)}`,
    );
  }
}

async function main(): Promise<void> {
  const redis = await startRedis();
  redisUrl = redis.url;
  admin = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  try {
    await compare(redis);
  } finally {
    await tracerProvider.shutdown();
    await admin.quit();
    redis.stop();
  }
}

async function compare(redis: LocalRedis): Promise<void> {
  const redisVersion = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown';
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  console.log(
    `Harrier telemetry benchmark — Node ${process.version} (${process.platform}/${process.arch}, ${cpu} x${cpus().length}), Redis ${redisVersion} at ${describeRedisUrl(redis.url)}${process.env.REDIS_URL ? '' : ' (started by the bench)'}`,
  );
  console.log(
    `Redis N = ${N_REDIS}, in-memory N = ${N_MEMORY}, after a ${WARM_UP}-message warm-up of each side, ${ROUNDS} rounds; load average at start ${fmtLoad()}\n`,
  );
  if (ONLY !== undefined) {
    await runOnly(ONLY);
    return;
  }

  const began = performance.now();
  for (const path of paths) {
    await path.run(off, WARM_UP);
    await path.run(on, WARM_UP);
  }
  const samples = paths.map(() => ({
    off: [] as Sample[],
    on: [] as Sample[],
    noSdk: [] as Sample[],
    offAls: [] as Sample[],
  }));
  for (let round = 0; round < ROUNDS; round++) {
    // Every other round runs "on" first, so neither side always follows the other.
    const sides = round % 2 === 0 ? [off, noSdk, offAls, on] : [on, offAls, noSdk, off];
    for (const [p, path] of paths.entries()) {
      for (const side of sides) samples[p]?.[side.name].push(await path.run(side));
    }
  }

  const body = paths.map((path, p) => {
    const { off: o = [], on: t = [], noSdk: z = [], offAls: a = [] } = samples[p] ?? {};
    const pairedAls = median(t.map((s, i) => s.perSecond / (a[i]?.perSecond ?? Number.NaN)));
    const offRate = median(o.map((s) => s.perSecond));
    const onRate = median(t.map((s) => s.perSecond));
    const paired = median(t.map((s, i) => s.perSecond / (o[i]?.perSecond ?? Number.NaN)));
    const pairedNoSdk = median(z.map((s, i) => s.perSecond / (o[i]?.perSecond ?? Number.NaN)));
    return [
      path.name,
      fmtRate(offRate),
      fmtRate(median(z.map((s) => s.perSecond))),
      fmtRate(onRate),
      fmtRatio(pairedNoSdk),
      fmtRatio(onRate / offRate),
      fmtRatio(paired),
      fmtOverhead(paired),
      fmtOverhead(pairedAls),
      `${median(o.map((s) => s.cpuUs)).toFixed(1)} / ${median(z.map((s) => s.cpuUs)).toFixed(1)} / ${median(a.map((s) => s.cpuUs)).toFixed(1)} / ${median(t.map((s) => s.cpuUs)).toFixed(1)}`,
    ];
  });
  console.log(
    table(
      [
        'path',
        'off msg/s',
        'no SDK msg/s',
        'on msg/s',
        'no SDK/off (paired)',
        'on/off (medians)',
        'on/off (paired)',
        'overhead',
        'overhead vs off+ALS',
        'CPU us/msg off / no SDK / off+ALS / on',
      ],
      body,
    ),
  );

  console.log('\nEvery round (msg/s, off | on):');
  console.log(
    table(
      ['path', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)],
      paths.map((path, p) => [
        path.name,
        ...(samples[p]?.off ?? []).map(
          (s, i) => `${fmtRate(s.perSecond)} | ${fmtRate(samples[p]?.on[i]?.perSecond ?? Number.NaN)}`,
        ),
      ]),
    ),
  );
  const worst = Math.min(
    ...samples.map(({ off: o, on: t }) =>
      median(t.map((s, i) => s.perSecond / (o[i]?.perSecond ?? Number.NaN))),
    ),
  );
  console.log(
    `\nTarget overhead under 15%: ${1 - worst < 0.15 ? 'met' : 'NOT met'} (worst path ${fmtOverhead(worst)}, from the paired ratios)`,
  );
  const floor = await sdkFloor();
  console.log(
    `SDK alone (no Harrier): ${floor.toFixed(1)} CPU us per span started, made active with context.with and ended (same provider, processor and exporter, context manager on), so at least ${floor.toFixed(1)} us/msg on Redis consume (1 span) and ${(2 * floor).toFixed(1)} us/msg in memory (2 spans) are the SDK's own`,
  );
  console.log(`Load average at end ${fmtLoad()}; total ${((performance.now() - began) / 1000).toFixed(1)} s`);
}

await main();
