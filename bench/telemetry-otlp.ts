/**
 * What tracing costs with a real exporter, beside BullMQ's own OpenTelemetry integration: Redis
 * consume on four sides, in one run:
 *
 * - raw BullMQ: a bare `Worker` (concurrency {@link CONCURRENCY}, a processor that returns at once) on
 *   a queue pre-filled with {@link N} jobs added by `Queue.addBulk` (`removeOnComplete`), timed from
 *   `new Worker(...)` until its `completed` event has counted them;
 * - raw BullMQ + bullmq-otel: the same, with `telemetry: new BullMQOtel()` on the `Worker` (one
 *   CONSUMER `process` span per job, the child of the producer span its job's metadata names);
 * - Harrier: `bus.start()` with a trivial `@CommandHandler` on a queue pre-filled by Harrier's broker,
 *   until the `onHandled` hook (after the ack) has counted them;
 * - Harrier + harrier/telemetry: the same bus with `telemetry: harrierTracing()` (one CONSUMER
 *   `process` span per message, linked to the producer span its traceparent names).
 *
 * Every pre-filled message names the same producer span (BullMQ's job metadata, Harrier's
 * traceparent), so the jobs are identical with and without tracing. The traced sides share one SDK
 * set-up, registered globally as `NodeSDK` would: a `BasicTracerProvider` with a `BatchSpanProcessor`
 * into an `OTLPTraceExporter` (OTLP/HTTP, JSON) that posts to a stand-in collector
 * (bench/otlp-sink.ts) in a child process of its own, so receiving costs this process nothing; the
 * W3C trace-context propagator; and an `AsyncLocalStorageContextManager`, enabled for the traced runs
 * only (its promise hooks cost every await in the process, so they are part of what tracing costs).
 * The processor's queue is large enough that no span is dropped, and each traced run must deliver at
 * least one span per message to the collector.
 *
 * Per side, median of {@link ROUNDS} rounds (the sides alternate within each round and reverse their
 * order every other round): msg/s; this process's CPU time per message (`process.cpuUsage`, all
 * threads, including the flush of the spans still queued when the last message is done); the Redis
 * server's CPU per message (`INFO cpu`); spans and OTLP request bytes per message at the collector.
 * CPU time moves less than the rate on a shared host: read tracing's cost as the CPU difference.
 *
 * Run: `npm run bench:telemetry-otlp` (compiled with tsc into .bench/, like the other benches). It
 * starts a redis-server of its own unless REDIS_URL is set. BENCH_N sets N (default 10000),
 * BENCH_ROUNDS the rounds (default 5).
 */
import 'reflect-metadata';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { setImmediate as macrotask } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Queue, Worker } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';
import { Redis } from 'ioredis';
import { createBus, silentLogger, type MessageTelemetry } from '../src/index.js';
import { BullMqBroker, describeRedisUrl } from '../src/redis/index.js';
import { harrierTracing } from '../src/telemetry/index.js';
import { PlaceOrder, PlaceOrderHandler, payloadOf } from './place-order.js';
import { CHUNK, produceWithHarrier, registerRoute } from './produce-support.js';
import {
  adminClient,
  benchPrefix,
  connectAdmin,
  Counter,
  deleteKeys,
  fmtRate,
  median,
  redisCpuUs,
  startBenchRedis,
  table,
} from './support.js';

function positiveInteger(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`${name} must be a positive whole number, got "${process.env[name] ?? ''}"`);
  }
  return value;
}

const N = positiveInteger('BENCH_N', 10_000);
const ROUNDS = positiveInteger('BENCH_ROUNDS', 5);
const WARM_UP = Math.min(N, 2_000);
const CONCURRENCY = 16;
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 180_000;
/** The producer span every pre-filled message names: one of some other process. */
const PRODUCER_TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
/** The same, as BullMQ's producer side stores it in a job (`opts.telemetry.metadata`). */
const PRODUCER_METADATA = JSON.stringify({ traceparent: PRODUCER_TRACEPARENT });

// A full collection between runs keeps one run's garbage out of the next; the npm script runs
// `node` without --expose-gc, so the flag is switched on here.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

// ---------------------------------------------------------------- the collector

interface SinkStats {
  readonly requests: number;
  readonly bytes: number;
  readonly spans: number;
  readonly malformed: number;
}

/** The stand-in collector, a child process; resolves once it listens. */
async function startSink(): Promise<{ readonly url: string; stats(): Promise<SinkStats>; stop(): void }> {
  const child: ChildProcess = spawn(
    process.execPath,
    [fileURLToPath(new URL('otlp-sink.js', import.meta.url))],
    {
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  if (child.stdout === null) throw new Error('The OTLP sink has no stdout');
  const lines = createInterface({ input: child.stdout });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    child.once('exit', (code) => {
      reject(new Error(`The OTLP sink exited with code ${String(code)} before it listened`));
    });
  });
  lines.close();
  const { port } = JSON.parse(first) as { port: number };
  const base = `http://127.0.0.1:${String(port)}`;
  return {
    url: `${base}/v1/traces`,
    stats: async () => (await (await fetch(`${base}/stats`)).json()) as SinkStats,
    stop: () => {
      child.stdin?.end();
    },
  };
}

// ---------------------------------------------------------------- tracing

let sink: Awaited<ReturnType<typeof startSink>>;
let tracerProvider: BasicTracerProvider;

/** Registers the SDK globally, as `NodeSDK.start()` does, exporting to the collector. */
function registerSdk(url: string): void {
  tracerProvider = new BasicTracerProvider({
    spanProcessors: [
      // A queue that never fills within a run: a dropped span would be work not measured.
      new BatchSpanProcessor(new OTLPTraceExporter({ url }), { maxQueueSize: 1 << 17 }),
    ],
  });
  trace.setGlobalTracerProvider(tracerProvider);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
}

// ---------------------------------------------------------------- runs

interface Sample {
  readonly perSecond: number;
  /** CPU time of this process (all threads) per message, in microseconds. */
  readonly cpuUs: number;
  /** CPU time of the Redis server per message, in microseconds. */
  readonly redisCpuUs: number;
  /** Spans the collector received per message. */
  readonly spans: number;
  /** OTLP request bytes the collector received per message. */
  readonly bytes: number;
}

/** The Redis the bench runs on, and its own connection to it, which reads INFO and deletes keys. */
let redisUrl = '';
let admin: Redis;

/**
 * Times `work` (which consumes `n` messages), traced or not. The spans still queued when the last
 * message is done are flushed inside the CPU measurement: exporting them is work of this run.
 */
async function measure(traced: boolean, n: number, work: () => Promise<void>): Promise<Sample> {
  if (traced) context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  try {
    const sinkBefore = await sink.stats();
    const redisBefore = await redisCpuUs(admin);
    const cpu = process.cpuUsage();
    const started = performance.now();
    await work();
    const ms = performance.now() - started;
    if (traced) await tracerProvider.forceFlush();
    const used = process.cpuUsage(cpu);
    const redisUsed = (await redisCpuUs(admin)) - redisBefore;
    const sinkAfter = await sink.stats();
    const spans = sinkAfter.spans - sinkBefore.spans;
    if (sinkAfter.malformed > 0)
      throw new Error(`The collector could not read ${String(sinkAfter.malformed)} requests`);
    if (traced && spans < n)
      throw new Error(`The traced run delivered ${String(spans)} spans for ${String(n)} messages`);
    return {
      perSecond: n / (ms / 1000),
      cpuUs: (used.user + used.system) / n,
      redisCpuUs: redisUsed / n,
      spans: spans / n,
      bytes: (sinkAfter.bytes - sinkBefore.bytes) / n,
    };
  } finally {
    if (traced) context.disable();
  }
}

/** After a run: its last spans (a closing worker's) leave before the next run counts. */
async function settle(): Promise<void> {
  await tracerProvider.forceFlush();
  await macrotask();
  gc();
}

/** Raw BullMQ consume, with bullmq-otel on the `Worker` when `traced`. */
async function rawBullMq(traced: boolean, n = N): Promise<Sample> {
  const prefix = benchPrefix('harrier-bench-otlp');
  const name = 'bench';
  const producer = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const consumer = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue(name, { connection: producer, prefix });
  let worker: Worker | undefined;
  try {
    for (let from = 0; from < n; from += CHUNK) {
      const jobs = [];
      for (let i = from; i < Math.min(n, from + CHUNK); i++) {
        jobs.push({
          name: PlaceOrder.type,
          data: payloadOf(i),
          opts: { removeOnComplete: true, telemetry: { metadata: PRODUCER_METADATA } },
        });
      }
      await queue.addBulk(jobs);
    }
    const completed = new Counter(RUN_TIMEOUT_MS);
    return await measure(traced, n, async () => {
      worker = new Worker(name, () => Promise.resolve(), {
        connection: consumer,
        prefix,
        concurrency: CONCURRENCY,
        ...(traced ? { telemetry: new BullMQOtel() } : {}),
      });
      worker.on('completed', () => {
        completed.hit();
      });
      worker.on('error', () => undefined);
      await completed.until(n);
    });
  } finally {
    await worker?.close();
    await queue.close();
    producer.disconnect();
    consumer.disconnect();
    await deleteKeys(admin, prefix);
    await settle();
  }
}

/** Fills Harrier's PlaceOrder queue with `n` commands, each naming the producer span. */
async function prefillHarrier(prefix: string, n: number): Promise<void> {
  await registerRoute(redisUrl, prefix, PlaceOrder.type);
  const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
  try {
    await produceWithHarrier(broker, PlaceOrder, payloadOf, n, { traceparent: PRODUCER_TRACEPARENT });
  } finally {
    await broker.close();
  }
}

/** Harrier consume, with `harrierTracing()` when `traced`. */
async function harrier(traced: boolean, n = N): Promise<Sample> {
  const prefix = benchPrefix('harrier-bench-otlp');
  const handled = new Counter(RUN_TIMEOUT_MS);
  const telemetry: { telemetry?: MessageTelemetry } = traced ? { telemetry: harrierTracing() } : {};
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
    ...telemetry,
  });
  try {
    await prefillHarrier(prefix, n);
    return await measure(traced, n, async () => {
      await bus.start();
      await handled.until(n);
    });
  } finally {
    await bus.stop();
    await deleteKeys(admin, prefix);
    await settle();
  }
}

// ---------------------------------------------------------------- table

interface Side {
  readonly name: string;
  readonly run: (n?: number) => Promise<Sample>;
}

const sides: readonly Side[] = [
  { name: 'raw BullMQ', run: (n) => rawBullMq(false, n) },
  { name: 'raw BullMQ + bullmq-otel', run: (n) => rawBullMq(true, n) },
  { name: 'Harrier', run: (n) => harrier(false, n) },
  { name: 'Harrier + harrier/telemetry', run: (n) => harrier(true, n) },
];

const fmtLoad = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const fmtUs = (us: number): string => us.toFixed(1);

async function main(): Promise<void> {
  const redis = await startBenchRedis();
  redisUrl = redis.url;
  admin = adminClient(redisUrl);
  if (!(await connectAdmin(admin, redisUrl))) {
    redis.stop();
    return;
  }
  sink = await startSink();
  registerSdk(sink.url);
  try {
    await compare(redis.url);
  } finally {
    await tracerProvider.shutdown();
    sink.stop();
    await admin.quit();
    redis.stop();
  }
}

async function compare(url: string): Promise<void> {
  const redisVersion = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown';
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  console.log(
    `Harrier OTLP tracing benchmark — Node ${process.version} (${process.platform}/${process.arch}, ${cpu} x${String(cpus().length)}), Redis ${redisVersion} at ${describeRedisUrl(url)}${process.env.REDIS_URL ? '' : ' (started by the bench)'}`,
  );
  console.log(
    `Redis consume, N = ${String(N)}, concurrency ${String(CONCURRENCY)}, after a ${String(WARM_UP)}-message warm-up of each side, ${String(ROUNDS)} rounds; OTLP/HTTP JSON to a collector in a child process; load average at start ${fmtLoad()}\n`,
  );
  const began = performance.now();
  for (const side of sides) await side.run(WARM_UP);
  const samples = sides.map(() => [] as Sample[]);
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? [0, 1, 2, 3] : [3, 2, 1, 0];
    for (const s of order) samples[s]?.push(await (sides[s] as Side).run());
  }

  const med = (s: number, pick: (sample: Sample) => number): number => median((samples[s] ?? []).map(pick));
  // Each traced side against its untraced one: raw BullMQ + bullmq-otel against raw BullMQ, Harrier's against Harrier.
  const baseOf = (s: number): number => (s % 2 === 1 ? s - 1 : s);
  const body = sides.map((side, s) => {
    const base = baseOf(s);
    const paired = median(
      (samples[s] ?? []).map((sample, i) => sample.perSecond / (samples[base]?.[i]?.perSecond ?? Number.NaN)),
    );
    return [
      side.name,
      fmtRate(med(s, (x) => x.perSecond)),
      s === base ? '' : `${paired.toFixed(3)}x`,
      fmtUs(med(s, (x) => x.cpuUs)),
      s === base ? '' : `+${fmtUs(med(s, (x) => x.cpuUs) - med(base, (x) => x.cpuUs))}`,
      fmtUs(med(s, (x) => x.redisCpuUs)),
      med(s, (x) => x.spans).toFixed(2),
      fmtRate(med(s, (x) => x.bytes)),
    ];
  });
  console.log(
    table(
      [
        'side',
        'msg/s',
        'vs untraced (paired)',
        'CPU us/msg',
        'tracing CPU us/msg',
        'Redis CPU us/msg',
        'spans/msg',
        'OTLP bytes/msg',
      ],
      body,
    ),
  );
  console.log('\nEvery round (msg/s | CPU us/msg):');
  console.log(
    table(
      ['side', ...Array.from({ length: ROUNDS }, (_, i) => `round ${String(i + 1)}`)],
      sides.map((side, s) => [
        side.name,
        ...(samples[s] ?? []).map((x) => `${fmtRate(x.perSecond)} | ${fmtUs(x.cpuUs)}`),
      ]),
    ),
  );
  console.log(
    `\nLoad average at end ${fmtLoad()}; total ${((performance.now() - began) / 1000).toFixed(1)} s`,
  );
}

await main();
