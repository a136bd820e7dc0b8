/**
 * Throughput of Harrier's BullMqBroker + dispatcher next to raw BullMQ, on the same Redis, with the
 * same N messages and the same concurrency.
 *
 * Measured, in messages per second (median of {@link ROUNDS} rounds; each round and each system gets
 * a fresh key prefix, deleted afterwards):
 *
 * - produce: N messages added to an empty queue in chunks of {@link CHUNK}, one chunk after another,
 *   timed from a client that has not connected yet on every side.
 *   Raw BullMQ: `Queue.addBulk` of `{ name, data: payload, opts: { removeOnComplete: true } }`; and
 *   raw BullMQ with job ids (produce only): the same with a fresh UUID as `jobId` and as deduplication
 *   id (ttl as Harrier's dedupe window), the dedupe guarantee Harrier gives, which the produce target
 *   is measured against (bench/redis-produce.ts splits that gap further).
 *   Harrier: `prepareMessage` (zod validation, UUIDv7, envelope encoding, as `bus.send` does) and
 *   `broker.publishBatch` of each chunk; the timing covers both. `bus.send` is not used: it publishes
 *   one message per call, which is a latency figure, not a batch throughput one.
 * - consume: from worker start until N messages are done, with the queue pre-filled. Raw BullMQ: timed
 *   from `new Worker(...)` (concurrency {@link CONCURRENCY}, a processor that returns at once) until
 *   its `completed` event has counted N. Harrier: timed from `bus.start()` (registers, opens the
 *   receiver and its BullMQ worker; dispatcher concurrency {@link CONCURRENCY}, a trivial
 *   `@CommandHandler`) until the `onHandled` hook, which fires after the ack, has counted N.
 *
 * A third system separates the cost of Harrier's job shape from the cost of Harrier's code: "raw BullMQ
 * on Harrier's jobs" produces with `BullMqBroker.publishBatch` (so the jobs are exactly what Harrier
 * stores: the encoded envelope, the message id as job id and deduplication id, its retry settings) and
 * consumes them with the same bare `Worker` as raw BullMQ, a processor that returns at once. Its
 * consume rate is the most Harrier's broker could reach with that job shape if decoding, validation,
 * dispatch and dependency injection cost nothing.
 *
 * Two more measure the opt-in `dedupe: 'while-queued'` of a definition (its jobs carry the message id as
 * job id but no deduplication id, so a duplicate is dropped only while its job exists): "Harrier
 * while-queued" is the Harrier system on that definition (same type, schema and handler), and "raw on
 * while-queued jobs" the bare `Worker` on the jobs Harrier's broker writes for it. The target of that
 * mode is consume at 0.95x raw BullMQ or better, by rate and by CPU.
 *
 * A calibration run shows what the target leaves room for: raw BullMQ again, with a processor that
 * spends {@link SPIN_US} µs of CPU (a busy loop) on each job before it returns.
 *
 * Each system first runs an untimed warm-up of {@link WARM_UP} messages, so round 1 does not time
 * the JIT. Besides the rates, the table shows this process's CPU time per consumed message (all
 * threads, `process.cpuUsage`): on a shared or small machine it varies less than the rates do.
 *
 * Both sides remove completed jobs (Harrier's broker always passes `removeOnComplete: true`). Harrier's
 * jobs also carry what its guarantees need: the encoded envelope, the message id as job id and as
 * deduplication id (one more key per job), and its retry settings.
 *
 * Run: `npm run bench:redis` (it compiles src/ and bench/ with tsc into .bench/, then runs `node
 * .bench/bench/redis.js`, so what is measured is the same JavaScript as the published build, not
 * TypeScript run through a loader) against `REDIS_URL` (default redis://127.0.0.1:6379). Set
 * BENCH_N to change N (default 20000). A Redis shared with other work (such as a test run) skews
 * the figures.
 */
import 'reflect-metadata';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { silentLogger } from '../src/index.js';
import { BullMqBroker, describeRedisUrl } from '../src/redis/index.js';
import type { DedupeMode } from '../src/index.js';
import { PlaceOrder, PlaceOrderWhileQueued, payloadOf, placeOrderBus } from './place-order.js';
import { CHUNK, produceRaw, produceWithHarrier, registerRoute } from './produce-support.js';
import {
  adminClient,
  benchPrefix,
  connectAdmin,
  Counter,
  deleteKeys,
  fmtRate,
  keysOf,
  median,
  redisCpuUs,
  table,
} from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
/** Messages of the untimed warm-up run of each system, so round 1 is not a JIT warm-up. */
const WARM_UP = Math.min(N, 2_000);
const CONCURRENCY = 16;
/** Rounds (BENCH_ROUNDS, default 3); on a noisy host, 7 gives a steadier median. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** CPU time the calibration run's processor spends on each job, in microseconds. */
const SPIN_US = Number(process.env.BENCH_SPIN_US ?? 10);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 180_000;
/** What `dedupe: 'while-queued'` must reach against raw BullMQ, by rate and by CPU. */
const WHILE_QUEUED_TARGET = 0.95;
/** The PlaceOrder definition of each dedupe mode. */
const definitionOf = (dedupe: DedupeMode): typeof PlaceOrder =>
  dedupe === 'window' ? PlaceOrder : PlaceOrderWhileQueued;

if (!Number.isInteger(N) || N < 1) {
  throw new Error(`BENCH_N must be a positive whole number, got "${process.env.BENCH_N ?? ''}"`);
}

interface Sample {
  readonly produce: number;
  readonly consume: number;
  /** CPU time of this process (all threads) per consumed message, in microseconds. */
  readonly consumeCpuUs: number;
  /** CPU time of the Redis server (`INFO cpu`, user + sys) per consumed message, in microseconds. */
  readonly consumeRedisCpuUs: number;
  /** Bytes of one job's data as stored (JSON), for the first message. */
  readonly jobBytes: number;
}

const cpuPerMessage = (since: NodeJS.CpuUsage, n: number): number => {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / n;
};
const newPrefix = (): string => benchPrefix();

/** The bench's own connection: checks Redis, measures job sizes and deletes each run's keys. */
const admin = adminClient(REDIS_URL);

/** Bytes of the `data` field of some job under `prefix`. */
async function jobBytes(prefix: string, queue: string): Promise<number> {
  for (const key of await keysOf(admin, `${prefix}:${queue}:`)) {
    if ((await admin.type(key)) !== 'hash') continue;
    const data = await admin.hget(key, 'data');
    if (data !== null) return Buffer.byteLength(data);
  }
  return Number.NaN;
}

/**
 * Raw BullMQ: `Queue.addBulk` of the bare payload, then a bare `Worker`. With `harrierJobs` (the
 * dedupe mode of the definition), the jobs are published by Harrier's broker instead, and the same
 * bare `Worker` consumes them.
 */
async function rawBullMq(n = N, harrierJobs: DedupeMode | false = false, spinUs = 0): Promise<Sample> {
  const rate = (ms: number): number => n / (ms / 1000);
  const prefix = newPrefix();
  const name = harrierJobs === false ? 'bench' : `cmd~${PlaceOrder.type}`;
  const producer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const consumer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(name, { connection: producer, prefix });
  const broker =
    harrierJobs === false
      ? undefined
      : new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
  let worker: Worker | undefined;
  try {
    if (broker !== undefined) await registerRoute(REDIS_URL, prefix, PlaceOrder.type);
    // Timed from a fresh client on every side: Harrier's broker connects on its first publish.
    let started = performance.now();
    await queue.waitUntilReady();
    if (broker !== undefined && harrierJobs !== false) {
      await produceWithHarrier(broker, definitionOf(harrierJobs), payloadOf, n);
    } else {
      await produceRaw(queue, PlaceOrder.type, payloadOf, n, false);
    }
    const produce = rate(performance.now() - started);
    const bytes = await jobBytes(prefix, name);

    const completed = new Counter(RUN_TIMEOUT_MS);
    const redisCpu = await redisCpuUs(admin);
    const cpu = process.cpuUsage();
    started = performance.now();
    const processor =
      spinUs > 0
        ? (): Promise<void> => {
            const until = performance.now() + spinUs / 1000;
            while (performance.now() < until);
            return Promise.resolve();
          }
        : (): Promise<void> => Promise.resolve();
    worker = new Worker(name, processor, {
      connection: consumer,
      prefix,
      concurrency: CONCURRENCY,
    });
    worker.on('completed', () => {
      completed.hit();
    });
    worker.on('error', () => undefined);
    await completed.until(n);
    const consume = rate(performance.now() - started);
    const consumeCpuUs = cpuPerMessage(cpu, n);
    const consumeRedisCpuUs = ((await redisCpuUs(admin)) - redisCpu) / n;
    return { produce, consume, consumeCpuUs, consumeRedisCpuUs, jobBytes: bytes };
  } finally {
    await worker?.close();
    await queue.close();
    await broker?.close();
    producer.disconnect();
    consumer.disconnect();
    await deleteKeys(admin, prefix);
  }
}

/**
 * Raw BullMQ's produce with the dedupe guarantee Harrier gives: `addBulk` with a fresh UUID as job id
 * and deduplication id (ttl as Harrier's default dedupe window). Produce only: its rate in msg/s.
 */
async function rawWithIds(n = N): Promise<number> {
  const prefix = newPrefix();
  const producer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(`cmd~${PlaceOrder.type}`, { connection: producer, prefix });
  try {
    const started = performance.now();
    await queue.waitUntilReady();
    await produceRaw(queue, PlaceOrder.type, payloadOf, n, true);
    return n / ((performance.now() - started) / 1000);
  } finally {
    await queue.close();
    producer.disconnect();
    await deleteKeys(admin, prefix);
  }
}

/** Harrier: `publishBatch`, then a bus handling PlaceOrder; `dedupe` is the definition's mode. */
async function harrier(n = N, dedupe: DedupeMode = 'window'): Promise<Sample> {
  const rate = (ms: number): number => n / (ms / 1000);
  const prefix = newPrefix();
  const handled = new Counter(RUN_TIMEOUT_MS);
  const broker = new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
  const bus = placeOrderBus(
    broker,
    CONCURRENCY,
    () => {
      handled.hit();
    },
    dedupe,
  );
  try {
    await registerRoute(REDIS_URL, prefix, PlaceOrder.type);
    let started = performance.now();
    await produceWithHarrier(broker, definitionOf(dedupe), payloadOf, n);
    const produce = rate(performance.now() - started);
    const bytes = await jobBytes(prefix, `cmd~${PlaceOrder.type}`);

    const redisCpu = await redisCpuUs(admin);
    const cpu = process.cpuUsage();
    started = performance.now();
    await bus.start();
    await handled.until(n);
    const consume = rate(performance.now() - started);
    const consumeCpuUs = cpuPerMessage(cpu, n);
    const consumeRedisCpuUs = ((await redisCpuUs(admin)) - redisCpu) / n;
    return { produce, consume, consumeCpuUs, consumeRedisCpuUs, jobBytes: bytes };
  } finally {
    await bus.stop();
    await deleteKeys(admin, prefix);
  }
}

async function main(): Promise<void> {
  if (!(await connectAdmin(admin, REDIS_URL))) return;
  const server = await admin.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(server)?.[1] ?? 'unknown';
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  console.log(
    `Harrier Redis benchmark — Node ${process.version} (${process.platform}/${process.arch}, ${cpu}), Redis ${redisVersion} at ${describeRedisUrl(REDIS_URL)}`,
  );
  console.log(
    `N = ${N} messages per run after a ${WARM_UP}-message warm-up of each, concurrency ${CONCURRENCY}, produce in chunks of ${CHUNK}, median of ${ROUNDS} rounds\n`,
  );

  const began = performance.now();
  await rawBullMq(WARM_UP);
  await rawWithIds(WARM_UP);
  await rawBullMq(WARM_UP, 'window');
  await harrier(WARM_UP);
  await rawBullMq(WARM_UP, 'while-queued');
  await harrier(WARM_UP, 'while-queued');
  const raw: Sample[] = [];
  const rawIds: number[] = [];
  const shaped: Sample[] = [];
  const ours: Sample[] = [];
  const shapedWq: Sample[] = [];
  const oursWq: Sample[] = [];
  const spun: Sample[] = [];
  // Rounds alternate the systems so drift (JIT, Redis memory, other load) spreads over all of them.
  for (let round = 0; round < ROUNDS; round++) {
    raw.push(await rawBullMq());
    rawIds.push(await rawWithIds());
    shaped.push(await rawBullMq(N, 'window'));
    ours.push(await harrier());
    shapedWq.push(await rawBullMq(N, 'while-queued'));
    oursWq.push(await harrier(N, 'while-queued'));
    if (SPIN_US > 0) spun.push(await rawBullMq(N, false, SPIN_US));
  }

  const row = (label: string, pick: (s: Sample) => number): string[] => {
    const r = median(raw.map(pick));
    const j = median(shaped.map(pick));
    const h = median(ours.map(pick));
    const jw = median(shapedWq.map(pick));
    const hw = median(oursWq.map(pick));
    const x = (value: number): string => `${(value / r).toFixed(3)}x`;
    return [label, fmtRate(r), fmtRate(j), fmtRate(h), fmtRate(jw), fmtRate(hw), x(j), x(h), x(jw), x(hw)];
  };
  const body = [
    row('produce msg/s', (s) => s.produce),
    row('consume msg/s', (s) => s.consume),
    row('consume CPU us/msg (this process)', (s) => s.consumeCpuUs),
    row('consume CPU us/msg (Redis server)', (s) => s.consumeRedisCpuUs),
    row('consume CPU us/msg (both)', (s) => s.consumeCpuUs + s.consumeRedisCpuUs),
  ];
  console.log(
    table(
      [
        '',
        'raw BullMQ',
        "raw on Harrier's jobs",
        'Harrier',
        'raw on while-queued jobs',
        'Harrier while-queued',
        'jobs/raw',
        'Harrier/raw',
        'wq jobs/raw',
        'Harrier wq/raw',
      ],
      body,
    ),
  );

  console.log('\nEvery round (msg/s):');
  console.log(
    table(
      ['run', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)],
      [
        ['raw BullMQ produce', ...raw.map((s) => fmtRate(s.produce))],
        ['raw BullMQ + job ids produce', ...rawIds.map(fmtRate)],
        ["raw on Harrier's jobs produce", ...shaped.map((s) => fmtRate(s.produce))],
        ['Harrier    produce', ...ours.map((s) => fmtRate(s.produce))],
        ['raw BullMQ consume', ...raw.map((s) => fmtRate(s.consume))],
        ["raw on Harrier's jobs consume", ...shaped.map((s) => fmtRate(s.consume))],
        ['Harrier    consume', ...ours.map((s) => fmtRate(s.consume))],
        ['raw on while-queued jobs consume', ...shapedWq.map((s) => fmtRate(s.consume))],
        ['Harrier while-queued consume', ...oursWq.map((s) => fmtRate(s.consume))],
        ['raw BullMQ consume CPU us/msg', ...raw.map((s) => fmtRate(s.consumeCpuUs))],
        ["raw on Harrier's jobs consume CPU us/msg", ...shaped.map((s) => fmtRate(s.consumeCpuUs))],
        ['Harrier    consume CPU us/msg', ...ours.map((s) => fmtRate(s.consumeCpuUs))],
        ['Harrier while-queued consume CPU us/msg', ...oursWq.map((s) => fmtRate(s.consumeCpuUs))],
        ['raw BullMQ consume Redis CPU us/msg', ...raw.map((s) => s.consumeRedisCpuUs.toFixed(1))],
        [
          "raw on Harrier's jobs consume Redis CPU us/msg",
          ...shaped.map((s) => s.consumeRedisCpuUs.toFixed(1)),
        ],
        ['Harrier    consume Redis CPU us/msg', ...ours.map((s) => s.consumeRedisCpuUs.toFixed(1))],
        [
          'Harrier while-queued consume Redis CPU us/msg',
          ...oursWq.map((s) => s.consumeRedisCpuUs.toFixed(1)),
        ],
        ...(SPIN_US > 0
          ? [
              [`raw BullMQ + ${SPIN_US} us/job consume`, ...spun.map((s) => fmtRate(s.consume))],
              [
                `raw BullMQ + ${SPIN_US} us/job consume CPU us/msg`,
                ...spun.map((s) => fmtRate(s.consumeCpuUs)),
              ],
            ]
          : []),
      ],
    ),
  );
  console.log(
    `\nJob data per message: raw BullMQ ${raw[0]?.jobBytes ?? Number.NaN} bytes, Harrier ${ours[0]?.jobBytes ?? Number.NaN} bytes (envelope + delivery facts)`,
  );
  const produceRatios = ours.map((s, i) => s.produce / (rawIds[i] ?? Number.NaN));
  const produceRatio = median(produceRatios);
  console.log(
    `Target Harrier produce >= 0.85x raw BullMQ addBulk with job ids (median ${fmtRate(median(rawIds))} msg/s): ${produceRatio >= 0.85 ? 'met' : 'NOT met'} (${produceRatio.toFixed(3)}x; every round ${produceRatios.map((r) => r.toFixed(3)).join(' ')})`,
  );
  const ratio = median(ours.map((s) => s.consume)) / median(raw.map((s) => s.consume));
  const ceiling = median(shaped.map((s) => s.consume)) / median(raw.map((s) => s.consume));
  console.log(
    `Target Harrier consume >= 0.85x raw BullMQ: ${ratio >= 0.85 ? 'met' : 'NOT met'} (${ratio.toFixed(3)}x; a bare Worker on Harrier's jobs: ${ceiling.toFixed(3)}x)`,
  );
  const both = (s: Sample): number => s.consumeCpuUs + s.consumeRedisCpuUs;
  console.log(
    `Consume by CPU (this process + Redis per message; steadier than the rate on a shared host): Harrier ${(median(raw.map(both)) / median(ours.map(both))).toFixed(3)}x raw, a bare Worker on Harrier's jobs ${(median(raw.map(both)) / median(shaped.map(both))).toFixed(3)}x`,
  );
  const wqRate = median(oursWq.map((s) => s.consume)) / median(raw.map((s) => s.consume));
  const wqCpu = median(raw.map(both)) / median(oursWq.map(both));
  const wqMet = wqRate >= WHILE_QUEUED_TARGET && wqCpu >= WHILE_QUEUED_TARGET;
  console.log(
    `Target Harrier consume with dedupe 'while-queued' >= ${WHILE_QUEUED_TARGET}x raw BullMQ by rate and by CPU: ${wqMet ? 'met' : 'NOT met'} (rate ${wqRate.toFixed(3)}x, CPU ${wqCpu.toFixed(3)}x; every round by rate ${oursWq.map((s, i) => (s.consume / (raw[i]?.consume ?? Number.NaN)).toFixed(3)).join(' ')}, by CPU ${oursWq.map((s, i) => (both(raw[i] ?? s) / both(s)).toFixed(3)).join(' ')}; the default 'window': rate ${ratio.toFixed(3)}x, CPU ${(median(raw.map(both)) / median(ours.map(both))).toFixed(3)}x; a bare Worker on while-queued jobs: rate ${(median(shapedWq.map((s) => s.consume)) / median(raw.map((s) => s.consume))).toFixed(3)}x, CPU ${(median(raw.map(both)) / median(shapedWq.map(both))).toFixed(3)}x)`,
  );
  if (SPIN_US > 0) {
    const spunRatio = median(spun.map((s) => s.consume)) / median(raw.map((s) => s.consume));
    console.log(
      `Calibration: raw BullMQ whose processor spends ${SPIN_US} us of CPU per job consumes at ${spunRatio.toFixed(3)}x raw BullMQ (BENCH_SPIN_US to change, 0 to skip)`,
    );
  }
  console.log(`Total ${((performance.now() - began) / 1000).toFixed(1)} s`);
  await admin.quit();
}

await main();
