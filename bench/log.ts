/**
 * Append and replay rates of Harrier's event logs, beside raw Redis Streams, in one run.
 *
 * Measured, in records per second (median of {@link ROUNDS} rounds; every round and every system
 * gets a fresh key prefix or directory, deleted afterwards), for N envelopes of about 300 bytes on
 * one topic with {@link PARTITIONS} partitions, keys spread over the partitions by FNV-1a:
 *
 * - append: N records in chunks of {@link CHUNK}, the records of a chunk in flight together
 *   (`Promise.all` of `log.append`), one chunk after another. Raw Redis: one ioredis pipeline of
 *   `XADD <stream> * id key type body at` per chunk, to the same per-partition streams.
 * - replay: every partition read from offset 0 to its end in batches of {@link CHUNK}
 *   (`log.read(topic, partition, from, 1000)`), and each record's body decoded with `JSON.parse`,
 *   as a projection does. Raw Redis: `XRANGE <stream> <after> + COUNT 1000` and `JSON.parse` of the
 *   body field.
 *
 * Rows: InMemoryEventLog, FileEventLog (fsync on and off), RedisEventLog, raw ioredis. The log
 * implementations that are not in src/log yet are left out. Each system first runs an untimed
 * warm-up of {@link WARM_UP} records so round 1 does not time the JIT.
 *
 * Run: `npm run bench:log` (it compiles src/ and bench/ with tsc into .bench/, then runs `node
 * .bench/bench/log.js`, so what is measured is the same JavaScript as the published build, not
 * TypeScript run through a loader) against `REDIS_URL` (default redis://127.0.0.1:6379). Set
 * BENCH_N to change N (default 20000), and BENCH_ONLY to a word to run only the rows whose label
 * holds it (`BENCH_ONLY=redis` for the two Redis rows, `BENCH_ONLY=RedisEventLog` for a profile of
 * the log alone). A Redis or a disk shared with other work (such as a test run) skews the figures.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import type { AppendInput, EventLog, TopicSpec } from '../src/log/event-log.js';
import { partitionOf } from '../src/messages/partition.js';
import { uuidv7 } from '../src/messages/uuid-v7.js';
import { describeRedisUrl, RedisEventLog } from '../src/redis/index.js';
import { adminClient, benchPrefix, connectAdmin, deleteKeys, fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const WARM_UP = Math.min(N, 2_000);
const CHUNK = 1_000;
const ROUNDS = 3;
const PARTITIONS = 4;
const TOPIC = 'bench.orders';
const TYPE = 'bench.OrderPlaced';
const ENVELOPE_BYTES = 300;
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const ONLY = (process.env.BENCH_ONLY ?? '').toLowerCase();
const TOPICS: readonly TopicSpec[] = [{ name: TOPIC, partitions: PARTITIONS }];

if (!Number.isInteger(N) || N < 1) {
  throw new Error(`BENCH_N must be a positive whole number, got "${process.env.BENCH_N ?? ''}"`);
}

/** N records of about {@link ENVELOPE_BYTES} bytes each, made once and appended by every system. */
function makeRecords(n: number): AppendInput[] {
  const records: AppendInput[] = [];
  const occurredAt = new Date().toISOString();
  for (let i = 0; i < n; i++) {
    const id = uuidv7();
    const key = `order-${i % 997}`;
    const envelope = {
      v: 1,
      id,
      kind: 'event',
      type: TYPE,
      payload: { orderId: key, amount: 1 + (i % 100), currency: 'EUR', note: '' },
      meta: { correlationId: id, occurredAt, partitionKey: key, headers: {} },
    };
    const bare = JSON.stringify(envelope).length;
    envelope.payload.note = 'x'.repeat(Math.max(0, ENVELOPE_BYTES - bare));
    records.push({ id, key, type: TYPE, body: JSON.stringify(envelope) });
  }
  return records;
}

interface Sample {
  readonly append: number;
  readonly replay: number;
  /** This process's CPU time (user + system) per appended record, in µs: Redis's own time is not in it. */
  readonly appendCpu: number;
}

/** One system under test: appends then replays the records, and tidies up. */
interface System {
  readonly label: string;
  run(records: readonly AppendInput[]): Promise<Sample>;
}

const rate = (n: number, ms: number): number => n / (ms / 1000);
/** CPU µs per record of this process since `from` (a `process.cpuUsage()` reading). */
const cpuPer = (n: number, from: NodeJS.CpuUsage): number => {
  const used = process.cpuUsage(from);
  return (used.user + used.system) / n;
};
const newPrefix = (): string => benchPrefix();

/** The bench's own connection: checks Redis and deletes each run's keys. */
const admin = adminClient(REDIS_URL);

/** Appends and replays through the {@link EventLog} contract. */
async function measureLog(log: EventLog, records: readonly AppendInput[]): Promise<Sample> {
  let started = performance.now();
  const cpu = process.cpuUsage();
  for (let from = 0; from < records.length; from += CHUNK) {
    await Promise.all(records.slice(from, from + CHUNK).map((record) => log.append(TOPIC, record)));
  }
  const append = rate(records.length, performance.now() - started);
  const appendCpu = cpuPer(records.length, cpu);
  started = performance.now();
  let seen = 0;
  for (let partition = 0; partition < PARTITIONS; partition++) {
    for (let from = 0; ;) {
      const batch = await log.read(TOPIC, partition, from, CHUNK);
      for (const record of batch) JSON.parse(record.body);
      seen += batch.length;
      const last = batch.at(-1);
      if (last === undefined || batch.length < CHUNK) break;
      from = last.offset + 1;
    }
  }
  const replay = rate(records.length, performance.now() - started);
  if (seen !== records.length) throw new Error(`Replayed ${seen} of ${records.length} records`);
  return { append, replay, appendCpu };
}

const redisLog: System = {
  label: 'RedisEventLog',
  async run(records) {
    const prefix = newPrefix();
    const log = new RedisEventLog({ connection: REDIS_URL, topics: TOPICS, prefix });
    try {
      return await measureLog(log, records);
    } finally {
      await log.close();
      await deleteKeys(admin, prefix);
    }
  },
};

/** ioredis with the same fields and streams, without Harrier: no offsets, no uid or id index. */
const rawRedis: System = {
  label: 'raw ioredis XADD / XRANGE+parse',
  async run(records) {
    const prefix = newPrefix();
    const client = new Redis(REDIS_URL);
    const streamOf = (partition: number): string => `${prefix}:raw:${TOPIC}:${partition}`;
    try {
      let started = performance.now();
      const cpu = process.cpuUsage();
      for (let from = 0; from < records.length; from += CHUNK) {
        const pipeline = client.pipeline();
        const at = String(Date.now());
        for (const record of records.slice(from, from + CHUNK)) {
          const stream = streamOf(partitionOf(record.key, PARTITIONS));
          pipeline.xadd(
            stream,
            '*',
            'id',
            record.id,
            'key',
            record.key,
            'type',
            record.type,
            'body',
            record.body,
            'at',
            at,
          );
        }
        await pipeline.exec();
      }
      const append = rate(records.length, performance.now() - started);
      const appendCpu = cpuPer(records.length, cpu);
      started = performance.now();
      let seen = 0;
      for (let partition = 0; partition < PARTITIONS; partition++) {
        for (let start = '-'; ;) {
          const entries = await client.xrange(streamOf(partition), start, '+', 'COUNT', CHUNK);
          for (const [, fields] of entries) {
            const at = fields.indexOf('body');
            JSON.parse(fields[at + 1] ?? 'null');
          }
          seen += entries.length;
          const last = entries.at(-1);
          if (last === undefined || entries.length < CHUNK) break;
          start = `(${last[0]}`;
        }
      }
      const replay = rate(records.length, performance.now() - started);
      if (seen !== records.length) throw new Error(`Replayed ${seen} of ${records.length} records`);
      return { append, replay, appendCpu };
    } finally {
      client.disconnect();
      await deleteKeys(admin, prefix);
    }
  },
};

/** The log implementations of src/log that exist in this checkout. */
async function localSystems(): Promise<System[]> {
  const systems: System[] = [];
  try {
    const { InMemoryEventLog } = await import('../src/log/in-memory-event-log.js');
    systems.push({
      label: 'InMemoryEventLog',
      run: (records) => measureLog(new InMemoryEventLog({ topics: TOPICS }), records),
    });
  } catch (error) {
    console.log(`InMemoryEventLog left out: ${String(error)}`);
  }
  try {
    const { FileEventLog } = await import('../src/log/file-event-log.js');
    for (const fsync of [true, false]) {
      systems.push({
        label: `FileEventLog (fsync ${fsync ? 'on' : 'off'})`,
        async run(records) {
          const directory = await mkdtemp(join(tmpdir(), 'harrier-bench-log-'));
          const log = await FileEventLog.open({ directory, topics: TOPICS, fsync });
          try {
            return await measureLog(log, records);
          } finally {
            await log.close();
            await rm(directory, { recursive: true, force: true });
          }
        },
      });
    }
  } catch (error) {
    console.log(`FileEventLog left out: ${String(error)}`);
  }
  return systems;
}

async function main(): Promise<void> {
  if (!(await connectAdmin(admin, REDIS_URL))) return;
  const server = await admin.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(server)?.[1] ?? 'unknown';
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const records = makeRecords(N);
  const bytes = Math.round(records.reduce((sum, r) => sum + r.body.length, 0) / records.length);
  console.log(
    `Harrier event log benchmark — Node ${process.version} (${process.platform}/${process.arch}, ${cpu}), Redis ${redisVersion} at ${describeRedisUrl(REDIS_URL)}, temp dir ${tmpdir()}`,
  );
  console.log(
    `N = ${N} envelopes of ${bytes} bytes, 1 topic x ${PARTITIONS} partitions, append in chunks of ${CHUNK} in flight, replay in reads of ${CHUNK} + JSON.parse; median of ${ROUNDS} rounds after a ${WARM_UP}-record warm-up\n`,
  );

  const systems = [...(await localSystems()), redisLog, rawRedis].filter((s) =>
    s.label.toLowerCase().includes(ONLY),
  );
  const began = performance.now();
  for (const system of systems) await system.run(records.slice(0, WARM_UP));
  const samples = new Map<System, Sample[]>(systems.map((s) => [s, []]));
  // Rounds alternate the systems so drift (JIT, Redis memory, page cache) spreads over all of them.
  for (let round = 0; round < ROUNDS; round++) {
    for (const system of systems) samples.get(system)?.push(await system.run(records));
  }
  const medians = new Map(
    systems.map((s) => {
      const list = samples.get(s) ?? [];
      return [
        s,
        {
          append: median(list.map((x) => x.append)),
          replay: median(list.map((x) => x.replay)),
          appendCpu: median(list.map((x) => x.appendCpu)),
        },
      ];
    }),
  );
  console.log(
    table(
      ['implementation', 'append/s', 'replay/s', 'append CPU µs/record (Node)'],
      systems.map((s) => [
        s.label,
        fmtRate(medians.get(s)?.append ?? NaN),
        fmtRate(medians.get(s)?.replay ?? NaN),
        (medians.get(s)?.appendCpu ?? NaN).toFixed(1),
      ]),
    ),
  );
  console.log('\nEvery round (append/s | replay/s):');
  console.log(
    table(
      ['implementation', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)],
      systems.map((s) => [
        s.label,
        ...(samples.get(s) ?? []).map((x) => `${fmtRate(x.append)} | ${fmtRate(x.replay)}`),
      ]),
    ),
  );
  const ours = medians.get(redisLog);
  const raw = medians.get(rawRedis);
  const replayRatio = (ours?.replay ?? NaN) / (raw?.replay ?? NaN);
  const appendRatio = (ours?.append ?? NaN) / (raw?.append ?? NaN);
  console.log(
    `\nTarget RedisEventLog append >= 0.8x raw pipelined XADD: ${appendRatio >= 0.8 ? 'met' : 'NOT met'} (${appendRatio.toFixed(3)}x)`,
  );
  console.log(
    `Target RedisEventLog replay >= 0.5x raw XRANGE+parse: ${replayRatio >= 0.5 ? 'met' : 'NOT met'} (${replayRatio.toFixed(3)}x)`,
  );
  console.log(`Total ${((performance.now() - began) / 1000).toFixed(1)} s`);
  await admin.quit();
}

await main();
