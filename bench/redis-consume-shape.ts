/**
 * Which part of Harrier's job shape costs BullMQ's consume rate: the same bare `Worker`
 * (concurrency {@link CONCURRENCY}, a processor that returns at once, as raw BullMQ in bench/redis.ts)
 * consumes N jobs of each variant below, each variant adding one part of what
 * `BullMqBroker.publishBatch` stores (src/redis/job-data.ts) to raw BullMQ's job:
 *
 * 1. `raw`: data = the bare payload (31 bytes), opts `{ removeOnComplete: true }`.
 * 2. `+ jobId`: the message id (a UUIDv7 from `prepareMessage`) as `jobId`.
 * 3. `+ dedupe`: and as deduplication id, ttl = Harrier's default dedupe window.
 * 4. `+ retry/retention`: opts exactly as `jobOptions` builds them (attempts KEEP_ATTEMPTS, backoff
 *    `{ type: 'harrier' }`, removeOnFail `{ age, count }`), data still the bare payload.
 * 5. `+ envelope data`: data = `toJobData` of the prepared message (`{ b: <envelope text> }`): Harrier's
 *    job, added by plain `addBulk`.
 * 6. `Harrier publishBatch`: the jobs `BullMqBroker.publishBatch` writes (as bench/redis.ts's "raw on
 *    Harrier's jobs").
 *
 * and four more that take one part away from Harrier's job (5) or change one in raw (1):
 * `Harrier - jobId` (deduplication id only, BullMQ's numeric job id), `Harrier - dedupe` (job id only),
 * `raw + envelope data` (Harrier's data with raw's options) and `raw, queue "bench"` (raw's jobs in the
 * queue bench/redis.ts's raw BullMQ uses; every other variant uses Harrier's queue name, `cmd~` + type).
 *
 * Three more measure the "one parse per delivery instead of two" (run them with `5,11,12,13`):
 * `Harrier, body parsed` is variant 5 whose processor also parses the envelope text, as Harrier's
 * receiver does after BullMQ has parsed the job data; `unescaped, re-encoded` stores the envelope as
 * an object in the job data (a shape no reader reads), so BullMQ's parse is the only one, and its
 * processor stringifies it again, as a receiver that verifies signatures and stores dead letters by
 * their bytes would have to; `unescaped` is the same job with a processor that returns at once.
 *
 * Jobs are added untimed, in chunks of 1000, to a fresh key prefix per variant and round (deleted
 * afterwards); the consume is timed from `new Worker(...)` until its `completed` event has counted N.
 * Besides msg/s, the table shows this process's CPU per message (`process.cpuUsage`, all threads),
 * Redis's CPU per message (INFO cpu `used_cpu_sys + used_cpu_user` before and after, read on a
 * connection of its own; the whole server's, so other clients of it count too) and Redis commands per
 * message (INFO stats `total_commands_processed`, which counts the calls inside a Lua script too).
 * Each variant first runs an untimed warm-up; rounds alternate the order of the variants; figures are
 * medians over rounds, plus each variant's best round. On a shared machine one round's rate can be 20%
 * off: read the CPU columns and every round's rate too.
 *
 * Run: `npm run bench:redis-consume-shape` (BENCH_N, default 20000; BENCH_ROUNDS, default 3;
 * BENCH_VARIANTS, e.g. `1,9`, to run only some, by position in the list above) against `REDIS_URL`
 * (default redis://127.0.0.1:6379).
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { Queue, Worker, type JobsOptions } from 'bullmq';
import { Redis } from 'ioredis';
import { prepareMessage, type PreparedMessage } from '../src/extend.js';
import { silentLogger } from '../src/index.js';
import { BullMqBroker, describeRedisUrl } from '../src/redis/index.js';
import { jobOptions, toJobData } from '../src/redis/job-data.js';
import { PlaceOrder, payloadOf } from './place-order.js';
import { CHUNK, DEDUPE_TTL_MS, JOB_DEFAULTS, produceWithHarrier, registerRoute } from './produce-support.js';
import {
  adminClient,
  benchPrefix,
  connectAdmin,
  Counter,
  deleteKeys,
  fmtRate,
  infoField,
  median,
  redisCpuUs,
  table,
} from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WARM_UP = Math.min(N, 2_000);
const CONCURRENCY = 16;
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 180_000;
/** The queue of PlaceOrder's commands, as Harrier's broker names it; every variant uses it. */
const QUEUE = `cmd~${PlaceOrder.type}`;

if (!Number.isInteger(N) || N < 1) {
  throw new Error(`BENCH_N must be a positive whole number, got "${process.env.BENCH_N ?? ''}"`);
}

/** A job of a variant built from message `i` and its prepared form (untimed). */
type Build = (i: number, message: PreparedMessage, now: number) => { data: unknown; opts: JobsOptions };

interface Variant {
  readonly label: string;
  /** Undefined: the jobs are published by `BullMqBroker.publishBatch`. */
  readonly build?: Build;
  /** The queue, when not Harrier's {@link QUEUE}. */
  readonly queue?: string;
  /** What the processor does with each job's data; undefined: it returns at once. */
  readonly work?: (data: unknown) => unknown;
}

/** Harrier's job data with the envelope stored as an object instead of as its escaped text. */
const unescapedData = (m: PreparedMessage): { e: unknown } => ({ e: JSON.parse(m.outgoing.body) as unknown });

const harrierOpts = (m: PreparedMessage, now: number): JobsOptions =>
  jobOptions(m.outgoing, now, JOB_DEFAULTS);

const allVariants: readonly Variant[] = [
  { label: '1 raw', build: (i) => ({ data: payloadOf(i), opts: { removeOnComplete: true } }) },
  {
    label: '2 + jobId',
    build: (i, m) => ({ data: payloadOf(i), opts: { jobId: m.outgoing.id, removeOnComplete: true } }),
  },
  {
    label: '3 + dedupe',
    build: (i, m) => ({
      data: payloadOf(i),
      opts: {
        jobId: m.outgoing.id,
        deduplication: { id: m.outgoing.id, ttl: DEDUPE_TTL_MS },
        removeOnComplete: true,
      },
    }),
  },
  { label: '4 + retry/retention', build: (i, m, now) => ({ data: payloadOf(i), opts: harrierOpts(m, now) }) },
  {
    label: '5 + envelope data',
    build: (_i, m, now) => ({ data: toJobData(m.outgoing), opts: harrierOpts(m, now) }),
  },
  { label: '6 Harrier publishBatch' },
  {
    label: 'Harrier - jobId',
    build: (_i, m, now) => {
      const { jobId: _jobId, ...opts } = harrierOpts(m, now);
      return { data: toJobData(m.outgoing), opts };
    },
  },
  {
    label: 'Harrier - dedupe',
    build: (_i, m, now) => {
      const { deduplication: _dedupe, ...opts } = harrierOpts(m, now);
      return { data: toJobData(m.outgoing), opts };
    },
  },
  {
    label: 'raw + envelope data',
    build: (_i, m) => ({ data: toJobData(m.outgoing), opts: { removeOnComplete: true } }),
  },
  {
    label: 'raw, queue "bench"',
    build: (i) => ({ data: payloadOf(i), opts: { removeOnComplete: true } }),
    queue: 'bench',
  },
  {
    label: 'Harrier, body parsed',
    build: (_i, m, now) => ({ data: toJobData(m.outgoing), opts: harrierOpts(m, now) }),
    work: (data) => JSON.parse((data as { b: string }).b) as unknown,
  },
  {
    label: 'unescaped, re-encoded',
    build: (_i, m, now) => ({ data: unescapedData(m), opts: harrierOpts(m, now) }),
    work: (data) => JSON.stringify((data as { e: unknown }).e),
  },
  {
    label: 'unescaped',
    build: (_i, m, now) => ({ data: unescapedData(m), opts: harrierOpts(m, now) }),
  },
];

/** BENCH_VARIANTS: 1-based positions in the list above, comma-separated, to run only those (1 first). */
const picked = process.env.BENCH_VARIANTS?.split(',').map(Number);
const variants = picked === undefined ? allVariants : allVariants.filter((_, i) => picked.includes(i + 1));
if (variants.length === 0) {
  throw new Error(
    `BENCH_VARIANTS="${process.env.BENCH_VARIANTS ?? ''}" picks none of 1 to ${allVariants.length}`,
  );
}

interface Sample {
  readonly rate: number;
  /** CPU time of this process (all threads) per consumed message, in microseconds. */
  readonly cpuUs: number;
  /** Redis server CPU time (sys + user) per consumed message, in microseconds. */
  readonly redisCpuUs: number;
  /** Redis commands processed per consumed message. */
  readonly commands: number;
  /** Bytes of one job's data as stored. */
  readonly bytes: number;
}

/** The bench's own connection: INFO, job sizes, deleting each run's keys. */
const admin = adminClient(REDIS_URL);

/** Bytes of the `data` field of the first waiting job under `prefix`. */
async function jobBytes(queue: Queue, prefix: string): Promise<number> {
  const id = (await queue.getJobs(['wait'], 0, 0))[0]?.id;
  const data = id === undefined ? null : await admin.hget(`${prefix}:${queue.name}:${id}`, 'data');
  return data === null ? Number.NaN : Buffer.byteLength(data);
}

/** Adds `n` jobs of `variant` to a fresh prefix (untimed), then times a bare Worker consuming them. */
async function run(variant: Variant, n: number): Promise<Sample> {
  const prefix = benchPrefix();
  const producer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const consumer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(variant.queue ?? QUEUE, { connection: producer, prefix });
  let worker: Worker | undefined;
  try {
    const { build } = variant;
    if (build === undefined) {
      await registerRoute(REDIS_URL, prefix, PlaceOrder.type);
      const broker = new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
      try {
        await produceWithHarrier(broker, PlaceOrder, payloadOf, n);
      } finally {
        await broker.close();
      }
    } else {
      for (let from = 0; from < n; from += CHUNK) {
        const now = Date.now();
        const jobs = [];
        for (let i = from; i < Math.min(n, from + CHUNK); i++) {
          jobs.push({
            name: PlaceOrder.type,
            ...build(i, prepareMessage(PlaceOrder, payloadOf(i), {}, { now }), now),
          });
        }
        await queue.addBulk(jobs);
      }
    }
    const bytes = await jobBytes(queue, prefix);

    const done = new Counter(RUN_TIMEOUT_MS);
    const redisBefore = await redisCpuUs(admin);
    const commandsBefore = await infoField(admin, 'total_commands_processed', 'stats');
    const cpu = process.cpuUsage();
    const started = performance.now();
    const { work } = variant;
    const processor =
      work === undefined
        ? () => Promise.resolve()
        : (job: { data: unknown }) => {
            work(job.data);
            return Promise.resolve();
          };
    worker = new Worker(queue.name, processor, {
      connection: consumer,
      prefix,
      concurrency: CONCURRENCY,
    });
    worker.on('completed', () => {
      done.hit();
    });
    worker.on('error', () => undefined);
    await done.until(n);
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    const redisUs = (await redisCpuUs(admin)) - redisBefore;
    // Less the two INFO calls of the bench's own connection between the readings.
    const commands = (await infoField(admin, 'total_commands_processed', 'stats')) - commandsBefore - 2;
    return {
      rate: n / seconds,
      cpuUs: (used.user + used.system) / n,
      redisCpuUs: redisUs / n,
      commands: commands / n,
      bytes,
    };
  } finally {
    await worker?.close();
    await queue.close();
    producer.disconnect();
    consumer.disconnect();
    await deleteKeys(admin, prefix);
  }
}

async function main(): Promise<void> {
  if (!(await connectAdmin(admin, REDIS_URL))) return;
  const redisVersion = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown';
  const began = performance.now();
  for (const variant of variants) await run(variant, WARM_UP);
  const samples = new Map<Variant, Sample[]>(variants.map((v) => [v, []]));
  // Rounds alternate the order so drift (JIT, Redis memory, other load) spreads over every variant.
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? variants : [...variants].reverse();
    for (const variant of order) samples.get(variant)?.push(await run(variant, N));
  }

  const of = (variant: Variant): Sample[] => samples.get(variant) ?? [];
  const med = (variant: Variant, pick: (s: Sample) => number): number => median(of(variant).map(pick));
  // The ratios are to raw (variant 1) only when it ran; else they are left out, never taken against another.
  const raw = allVariants[0] !== undefined && variants.includes(allVariants[0]) ? allVariants[0] : undefined;
  const rawRate = raw === undefined ? Number.NaN : med(raw, (s) => s.rate);
  // Other load on the machine only ever slows a round down: the best round is the least disturbed one.
  const best = (variant: Variant): number => Math.max(...of(variant).map((s) => s.rate));
  const rawBest = raw === undefined ? Number.NaN : best(raw);
  const ratio = (value: number, ofRaw: number): string =>
    Number.isNaN(ofRaw) ? 'n/a' : `${(value / ofRaw).toFixed(3)}x`;
  console.log(
    `Job shape on consume: bare Worker, concurrency ${CONCURRENCY}, N = ${N} after a ${WARM_UP}-job warm-up, median of ${ROUNDS} rounds alternating; Node ${process.version}, Redis ${redisVersion} at ${describeRedisUrl(REDIS_URL)}\n`,
  );
  console.log(
    table(
      [
        'variant',
        'data bytes',
        'msg/s',
        'vs raw',
        'best msg/s',
        'vs raw',
        'CPU µs/msg',
        'Redis CPU µs/msg',
        'Redis cmds/msg',
        'every round msg/s',
      ],
      variants.map((variant) => {
        const rate = med(variant, (s) => s.rate);
        return [
          variant.label,
          String(of(variant)[0]?.bytes ?? Number.NaN),
          fmtRate(rate),
          ratio(rate, rawRate),
          fmtRate(best(variant)),
          ratio(best(variant), rawBest),
          med(variant, (s) => s.cpuUs).toFixed(1),
          med(variant, (s) => s.redisCpuUs).toFixed(1),
          med(variant, (s) => s.commands).toFixed(2),
          of(variant)
            .map((s) => fmtRate(s.rate))
            .join(' '),
        ];
      }),
    ),
  );
  console.log(`\nTotal ${((performance.now() - began) / 1000).toFixed(1)} s`);
  await admin.quit();
}

await main();
