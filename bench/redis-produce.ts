/**
 * Produce only, side by side in one run on the same Redis: raw BullMQ `addBulk` of the bare payload,
 * raw `addBulk` with job ids (a fresh UUID as job id and deduplication id, the same ttl as Harrier's
 * dedupe window: the same dedupe guarantee), and Harrier (`prepareMessage` +
 * `BullMqBroker.publishBatch`). Three rows in between split the gap: raw `addBulk` with job ids and
 * the BullMQ options Harrier sets (what those options cost), raw `addBulk` of Harrier's own
 * jobs (what the job shape costs, without the broker's code), and the same with the envelope stored
 * unescaped (what a smaller job shape would gain; readers do not read that shape). Shorter than
 * bench/redis.ts (no consume), so it can run under `node --cpu-prof` and be repeated.
 *
 * Each round runs every system once on a fresh key prefix (deleted afterwards), in alternating
 * order; the table gives medians of {@link ROUNDS} rounds of the rate and of this process's CPU time
 * per message (`process.cpuUsage`, all threads), which varies less than the rate on a shared host.
 *
 * Run: `npm run bench:redis-produce` against `REDIS_URL` (default redis://127.0.0.1:6379); BENCH_N
 * (default 20000) and BENCH_ROUNDS (default 5) change the size; BENCH_SYSTEMS=harrier (or raw, rawIds, rawOpts,
 * shaped, compact, comma-separated) runs only those, for a profile: `node --cpu-prof .bench/bench/redis-produce.js`.
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { silentLogger } from '../src/index.js';
import { BullMqBroker, describeRedisUrl } from '../src/redis/index.js';
import { PlaceOrder, payloadOf } from './place-order.js';
import { CHUNK, produceHarrierShaped, produceRaw, produceWithHarrier } from './produce-support.js';
import { benchPrefix, deleteKeys, fmtRate, median, redisCpuUs, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARM_UP = Math.min(N, 2_000);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

if (!Number.isInteger(N) || N < 1 || !Number.isInteger(ROUNDS) || ROUNDS < 1) {
  throw new Error('BENCH_N and BENCH_ROUNDS must be positive whole numbers');
}

type System = 'raw' | 'rawIds' | 'rawOpts' | 'shaped' | 'compact' | 'harrier';
const ALL_SYSTEMS: readonly System[] = ['raw', 'rawIds', 'rawOpts', 'shaped', 'compact', 'harrier'];
/** BENCH_SYSTEMS (comma-separated) runs only some systems, e.g. `harrier` under `node --cpu-prof`. */
const SYSTEMS = ALL_SYSTEMS.filter((s) => (process.env.BENCH_SYSTEMS ?? s).split(',').includes(s));
const LABELS: Record<System, string> = {
  raw: 'raw addBulk',
  rawIds: 'raw addBulk + job ids',
  rawOpts: "same + Harrier's retry/retention options",
  shaped: "raw addBulk of Harrier's jobs",
  compact: 'same, envelope not escaped (shape unread)',
  harrier: 'Harrier',
};

interface Sample {
  readonly rate: number;
  /** CPU time of this process per message, in microseconds. */
  readonly cpuUs: number;
  /** CPU time of the Redis server per message (INFO cpu, all its clients), in microseconds. */
  readonly redisUs: number;
}

const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });

/** One produce of `n` messages by `system` on a fresh prefix, timed from a client not yet connected. */
async function produce(system: System, n: number): Promise<Sample> {
  const prefix = benchPrefix();
  const queueName = `cmd~${PlaceOrder.type}`;
  const producer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection: producer, prefix });
  const broker =
    system === 'harrier'
      ? new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger })
      : undefined;
  try {
    if (broker !== undefined) {
      // The consuming endpoint's start() registers the route; the publisher learns it on its first batch.
      const registrar = new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
      await registrar.register('bench', [
        { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
      ]);
      await registrar.close();
    }
    const redisBefore = await redisCpuUs(admin);
    const cpu = process.cpuUsage();
    const started = performance.now();
    if (broker !== undefined) {
      await produceWithHarrier(broker, PlaceOrder, payloadOf, n);
    } else {
      await queue.waitUntilReady();
      if (system === 'shaped' || system === 'compact') {
        await produceHarrierShaped(queue, PlaceOrder, payloadOf, n, system === 'compact');
      } else {
        await produceRaw(queue, PlaceOrder.type, payloadOf, n, system !== 'raw', system === 'rawOpts');
      }
    }
    const ms = performance.now() - started;
    const used = process.cpuUsage(cpu);
    const redisUs = ((await redisCpuUs(admin)) - redisBefore) / n;
    return { rate: n / (ms / 1000), cpuUs: (used.user + used.system) / n, redisUs };
  } finally {
    await queue.close();
    await broker?.close();
    producer.disconnect();
    await deleteKeys(admin, prefix);
  }
}

async function main(): Promise<void> {
  console.log(
    `Harrier produce benchmark — Node ${process.version}, Redis at ${describeRedisUrl(REDIS_URL)}, N = ${N} in chunks of ${CHUNK}, ${ROUNDS} rounds after a ${WARM_UP}-message warm-up of each\n`,
  );
  for (const system of SYSTEMS) await produce(system, WARM_UP);
  const samples: Record<System, Sample[]> = {
    raw: [],
    rawIds: [],
    rawOpts: [],
    shaped: [],
    compact: [],
    harrier: [],
  };
  for (let round = 0; round < ROUNDS; round++) {
    // Alternating order spreads drift (JIT, Redis memory, other load) over every system.
    const order = round % 2 === 0 ? SYSTEMS : [...SYSTEMS].reverse();
    for (const system of order) samples[system].push(await produce(system, N));
  }
  const ratio = (s: Sample[], base: Sample[], pick: (x: Sample) => number): string =>
    `${(median(s.map(pick)) / median(base.map(pick))).toFixed(3)}x`;
  const rows = SYSTEMS.map((system) => [
    LABELS[system],
    fmtRate(median(samples[system].map((s) => s.rate))),
    median(samples[system].map((s) => s.cpuUs)).toFixed(1),
    median(samples[system].map((s) => s.redisUs)).toFixed(1),
    median(samples[system].map((s) => s.cpuUs + s.redisUs)).toFixed(1),
    ratio(samples[system], samples.rawIds, (s) => s.rate),
    ratio(samples.rawIds, samples[system], (s) => s.cpuUs + s.redisUs),
    samples[system].map((s) => fmtRate(s.rate)).join(' '),
    samples[system].map((s) => s.cpuUs.toFixed(1)).join(' '),
  ]);
  console.log(
    table(
      [
        '',
        'msg/s',
        'node CPU us/msg',
        'Redis CPU us/msg',
        'sum',
        'rate vs ids',
        'ids sum / sum',
        'every round msg/s',
        'every round node CPU us/msg',
      ],
      rows,
    ),
  );
  const perRound = samples.harrier.map((h, i) => h.rate / (samples.rawIds[i]?.rate ?? Number.NaN));
  console.log(
    `\nHarrier / raw addBulk with job ids, per round: ${perRound.map((r) => r.toFixed(3)).join(' ')}; median ${median(perRound).toFixed(3)}x (target >= 0.85x)`,
  );
  await admin.quit();
}

await main();
