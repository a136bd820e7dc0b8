/**
 * Harrier's PostgresBroker next to pg-boss, on the same PostgreSQL, with the same concurrency and the
 * same payload, in one run.
 *
 * 1. send -> handle -> ack throughput. {@link PRODUCERS} callers each await one send after another
 *    (N messages in all) while the consumer runs; timed from the first send until N messages are
 *    acknowledged. Besides msg/s, the CPU per message of this process (`process.cpuUsage`) and of
 *    the PostgreSQL server (read from /proc: the backends of the system's own connections, found by
 *    application_name, plus the server's background processes such as the WAL writer; other clients'
 *    backends apart), when the server runs on this machine.
 *    - Harrier: `createBus` on a `PostgresBroker` (default options), one `@CommandHandler` that reads
 *      the payload, concurrency {@link CONCURRENCY}; `bus.send`; counted by the `onHandled` hook,
 *      which fires after the ack.
 *    - pg-boss: `boss.send` to a queue of its own; one `boss.work` with batchSize {@link CONCURRENCY}
 *      (so at most as many messages in flight as Harrier's concurrency), whose handler runs the same
 *      trivial work on each job of its batch; counted once pg-boss has marked them completed (its
 *      `complete` runs after the handler, not awaited by it). A pg-boss worker sleeps out its polling
 *      interval after every fetch, even one that returned jobs, so it takes at most batchSize jobs
 *      per interval (0.5 s at least). Two rows therefore:
 *      "pg-boss, unpaced": every send calls `boss.notifyWorker`, and a full batch notifies the
 *      worker too, so it fetches again at once while jobs wait: the most pg-boss's SQL allows, with
 *      sender and worker in one process.
 *      "pg-boss, polling 0.5 s": as pg-boss runs by itself, polling at its minimum interval; timed on
 *      {@link PACED_N} messages (at 16 per 0.5 s, N would take minutes).
 *    A second table times the consuming side alone: N messages put in the queue first (untimed; in
 *    chunks of {@link PREFILL_CHUNK}: Harrier's `broker.publishBatch` of messages prepared as
 *    `bus.send` prepares them, pg-boss's `boss.insert`), then timed from the consumer's start
 *    (`bus.start()`, `boss.work`) until N are acknowledged.
 * 2. Hand-off latency on an idle system: single messages, each sent after the previous one has been
 *    acknowledged and a random pause; the time from send's resolve (the INSERT committed) to the
 *    handler's first line, p50 and p99 of {@link LATENCY_N} messages per system over all rounds
 *    (pg-boss at its default interval: a quarter of them, as each takes seconds). Harrier is woken by
 *    LISTEN/NOTIFY, pause {@link GAP_MIN_MS} ms + up to {@link GAP_SPREAD_MS} ms; pg-boss polls (its
 *    default 2 s, and its minimum 0.5 s), batchSize 1, pause {@link GAP_MIN_MS} ms + up to one
 *    polling interval, so a message arrives at any point of the worker's cycle (a fixed short pause
 *    after each ack would always land just after a poll).
 *
 * pg-boss runs with `schedule: false` (no cron, which Harrier's side has none of either) and its
 * defaults otherwise (retries, `supervise` on); Harrier's broker with its defaults. Each system
 * gets a pool of the bench's own (pg's defaults: 10 connections, as pg-boss's own pool; pg-boss
 * through its `db` option, sending its SQL with `pool.query` as its own Db does) that counts the
 * statements sent. Each round gets a fresh schema for Harrier (dropped afterwards) and a fresh
 * queue for pg-boss (its own partition) in one pg-boss schema of the run, dropped at the end;
 * rounds alternate the systems. Each system first runs an untimed warm-up of {@link WARM_UP}
 * messages.
 *
 * Run: `npm run bench:postgres` (compiles with tsc into .bench/, then runs the JavaScript) against
 * DATABASE_URL, else the local server at postgres://postgres@127.0.0.1:5432/postgres. BENCH_N sets N
 * (default 20000), BENCH_ROUNDS the rounds (3), BENCH_LATENCY_N the latency samples per system (200),
 * BENCH_PACED_N the messages of the polling pg-boss row (320).
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { z } from 'zod';
import { prepareMessage } from '../src/extend.js';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type HandlesCommand,
  type MessageBus,
  type PayloadOf,
} from '../src/index.js';
import { describePostgresUrl, migratePostgres, PostgresBroker } from '../src/postgres/index.js';
import { PlaceOrder, payloadOf, placeOrderBus } from './place-order.js';
import { PostgresCpu, type ServerCpu } from './postgres-cpu.js';
import { Counter, drive, fmtRate, median, table } from './support.js';

const positive = (name: string, fallback: number): number => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`${name} must be a positive whole number, got "${process.env[name] ?? ''}"`);
  }
  return value;
};

const N = positive('BENCH_N', 20_000);
const WARM_UP = Math.min(N, 2_000);
const ROUNDS = positive('BENCH_ROUNDS', 3);
/** Harrier's concurrency, and pg-boss's batchSize: at most this many messages in flight. */
const CONCURRENCY = 16;
/** Callers that each await one send after another. */
const PRODUCERS = 16;
/** Messages of the row where pg-boss polls by itself (16 per 0.5 s: about 10 s). */
const PACED_N = positive('BENCH_PACED_N', 320);
/** Latency samples per system, over all rounds. */
const LATENCY_N = positive('BENCH_LATENCY_N', 200);
/** The pause before each latency message: GAP_MIN_MS + random up to a spread (pg-boss: its interval). */
const GAP_MIN_MS = 10;
const GAP_SPREAD_MS = 40;
/** Messages per publishBatch / insert when filling a queue for the consume-only runs. */
const PREFILL_CHUNK = 1_000;
/** pg-boss's minimum polling interval (its MIN_POLLING_INTERVAL_MS) and its default. */
const PGBOSS_MIN_POLL_S = 0.5;
const PGBOSS_DEFAULT_POLL_S = 2;
const RUN_TIMEOUT_MS = 300_000;

const FROM_ENV = process.env.DATABASE_URL !== undefined && process.env.DATABASE_URL !== '';
const DATABASE_URL = FROM_ENV
  ? (process.env.DATABASE_URL ?? '')
  : 'postgres://postgres@127.0.0.1:5432/postgres';
/** The bench's own connection (schemas, counts, CPU): one backend, kept open, apart from the systems'. */
const ADMIN_NAME = 'harrier-bench-admin';
const tag = randomBytes(4).toString('hex');
/** pg-boss's schema for the whole run. */
const BOSS_SCHEMA = `pgboss_bench_${tag}`;
const admin = new pg.Pool({
  connectionString: DATABASE_URL,
  application_name: ADMIN_NAME,
  max: 1,
  idleTimeoutMillis: 0,
});
admin.on('error', () => undefined);

/** The command of the latency runs: its handler notes when it starts. */
const Ping = defineCommand('bench.Ping', { schema: z.object({ seq: z.number().int() }) });

/** When each latency message's handler started (performance.now()), by seq. */
const entered = new Map<number, number>();

@CommandHandler(Ping)
class PingHandler implements HandlesCommand<typeof Ping> {
  handle(payload: PayloadOf<typeof Ping>): void {
    entered.set(payload.seq, performance.now());
  }
}

interface Throughput {
  /** N / time from the first send until the last ack. */
  readonly rate: number;
  /** N / time from the first send until the last send resolved. */
  readonly sendRate: number;
  /** CPU of this process per message, µs. */
  readonly clientUs: number;
  /** CPU of the PostgreSQL server per message (own backends + background), µs; NaN when not local. */
  readonly dbUs: number;
  /** The part of {@link Throughput.dbUs} the server's background processes (autovacuum, WAL writer...) spent. */
  readonly dbBackgroundUs: number;
  readonly db: ServerCpu | undefined;
  /** Statements the system sent to PostgreSQL per message. */
  readonly statements: number;
}

/** A system's connections: its own pool, named for the CPU split, counting the statements it sends. */
interface Connections {
  readonly applicationName: string;
  readonly pool: pg.Pool;
  /** Statements sent so far by every client of the pool. */
  statements(): number;
}

/**
 * A pool of `applicationName` (pg's defaults otherwise: at most 10 connections, as pg-boss's own
 * pool) that counts every statement its clients send.
 */
function openConnections(applicationName: string): Connections {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, application_name: applicationName });
  pool.on('error', () => undefined);
  let count = 0;
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    client.query = ((...args: unknown[]) => {
      count++;
      return query(...args);
    }) as typeof client.query;
  });
  return { applicationName, pool, statements: () => count };
}

/** Latencies of one round, in ms: from send's resolve, and from send's call, to handler entry. */
interface Latencies {
  readonly fromCommit: number[];
  readonly fromCall: number[];
}

let sampler: PostgresCpu | undefined;

/** Times a throughput run: `send` from {@link PRODUCERS} callers, `acked` resolving once n are acked. */
async function timeThroughput(
  n: number,
  connections: Connections,
  send: (i: number) => Promise<unknown>,
  acked: (n: number) => Promise<void>,
): Promise<Throughput> {
  const before = sampler?.times();
  const statements = connections.statements();
  const cpu = process.cpuUsage();
  const started = performance.now();
  let sentAt = started;
  await Promise.all([
    drive(0, n, PRODUCERS, send).then(() => {
      sentAt = performance.now();
    }),
    acked(n),
  ]);
  const ended = performance.now();
  return {
    ...(await spent(n, connections, cpu, before, statements)),
    rate: n / ((ended - started) / 1000),
    sendRate: n / ((sentAt - started) / 1000),
  };
}

/** The CPU and statements per message since a run began, read as it ends (connections still open). */
async function spent(
  n: number,
  connections: Connections,
  cpu: NodeJS.CpuUsage,
  before: ReturnType<PostgresCpu['times']> | undefined,
  statements: number,
): Promise<Omit<Throughput, 'rate' | 'sendRate'>> {
  const used = process.cpuUsage(cpu);
  const sent = connections.statements() - statements;
  const db =
    sampler === undefined || before === undefined
      ? undefined
      : await sampler.since(before, connections.applicationName, ADMIN_NAME);
  return {
    clientUs: (used.user + used.system) / n,
    dbUs: db === undefined ? Number.NaN : (db.own + db.background) / n,
    dbBackgroundUs: db === undefined ? Number.NaN : db.background / n,
    db,
    statements: sent / n,
  };
}

/** Times the consuming side: `start` starts the consumer of a filled queue, `acked` as above. */
async function timeConsume(
  n: number,
  connections: Connections,
  start: () => Promise<unknown>,
  acked: (n: number) => Promise<void>,
): Promise<Throughput> {
  const before = sampler?.times();
  const statements = connections.statements();
  const cpu = process.cpuUsage();
  const started = performance.now();
  await start();
  await acked(n);
  const ended = performance.now();
  return {
    ...(await spent(n, connections, cpu, before, statements)),
    rate: n / ((ended - started) / 1000),
    sendRate: Number.NaN,
  };
}

/**
 * Sends `n` single messages, each once the previous one is acked and a pause of GAP_MIN_MS plus a
 * random part up to `spreadMs`.
 */
async function timeLatency(
  n: number,
  spreadMs: number,
  send: (seq: number) => Promise<unknown>,
  handled: Counter,
): Promise<Latencies> {
  const fromCommit: number[] = [];
  const fromCall: number[] = [];
  for (let seq = 0; seq < n; seq++) {
    await sleep(GAP_MIN_MS + Math.random() * spreadMs);
    const called = performance.now();
    await send(seq);
    const committed = performance.now();
    await handled.until(seq + 1);
    const entry = entered.get(seq);
    if (entry === undefined)
      throw new Error(`Message ${seq} was acked but its handler never noted its start`);
    fromCommit.push(entry - committed);
    fromCall.push(entry - called);
  }
  entered.clear();
  return { fromCommit, fromCall };
}

/**
 * A Harrier bus on a PostgresBroker in a fresh schema; `use` runs with it (started unless `start` is
 * false), then all is dropped.
 */
async function withHarrier<T>(
  applicationName: string,
  makeBus: (broker: PostgresBroker) => MessageBus,
  use: (bus: MessageBus, connections: Connections) => Promise<T>,
  start = true,
): Promise<T> {
  const schema = `harrier_bench_${tag}_${randomBytes(3).toString('hex')}`;
  await migratePostgres(admin, { schema });
  const connections = openConnections(applicationName);
  const broker = new PostgresBroker({ connection: connections.pool, schema, logger: silentLogger });
  const bus = makeBus(broker);
  try {
    if (start) await bus.start();
    return await use(bus, connections);
  } finally {
    await bus.stop();
    await connections.pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  }
}

async function harrierThroughput(n: number, round: string): Promise<Throughput> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  return withHarrier(
    `harrier-bench-${round}`,
    (broker) =>
      placeOrderBus(broker, CONCURRENCY, () => {
        handled.hit();
      }),
    (bus, connections) =>
      timeThroughput(
        n,
        connections,
        (i) => bus.send(PlaceOrder, payloadOf(i)),
        (target) => handled.until(target),
      ),
  );
}

/** Harrier consuming N messages that `broker.publishBatch` put in its queue first. */
async function harrierConsume(n: number, round: string): Promise<Throughput> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  return withHarrier(
    `harrier-bench-consume-${round}`,
    (broker) =>
      placeOrderBus(broker, CONCURRENCY, () => {
        handled.hit();
      }),
    async (bus, connections) => {
      // The route, as the consuming endpoint's start() registers it, so the publish is accepted.
      await bus.broker.register('bench', [
        { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
      ]);
      for (let from = 0; from < n; from += PREFILL_CHUNK) {
        const now = Date.now();
        const chunk = [];
        for (let i = from; i < Math.min(n, from + PREFILL_CHUNK); i++) {
          chunk.push(prepareMessage(PlaceOrder, payloadOf(i), {}, { now }).outgoing);
        }
        await bus.broker.publishBatch(chunk);
      }
      return timeConsume(
        n,
        connections,
        () => bus.start(),
        (target) => handled.until(target),
      );
    },
    false,
  );
}

async function harrierLatency(n: number, round: string): Promise<Latencies> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  return withHarrier(
    `harrier-bench-latency-${round}`,
    (broker) =>
      createBus({
        endpoint: 'bench',
        broker,
        handlers: [PingHandler],
        concurrency: CONCURRENCY,
        logger: silentLogger,
        hooks: {
          onHandled: () => {
            handled.hit();
          },
        },
      }),
    (bus) => timeLatency(n, GAP_SPREAD_MS, (seq) => bus.send(Ping, { seq }), handled),
  );
}

/** A started pg-boss on the run's schema and a fresh queue; `use` runs with it, then all is removed. */
async function withPgBoss<T>(
  applicationName: string,
  use: (boss: PgBoss, queue: string, connections: Connections) => Promise<T>,
): Promise<T> {
  const connections = openConnections(applicationName);
  const boss = new PgBoss({
    // What pg-boss's own Db does (pool.query), on the counting pool.
    db: { executeSql: (text, values) => connections.pool.query(text, values) },
    schema: BOSS_SCHEMA,
    schedule: false,
  });
  boss.on('error', () => undefined);
  const queue = `bench_${randomBytes(4).toString('hex')}`;
  try {
    await boss.start();
    await boss.createQueue(queue);
    return await use(boss, queue, connections);
  } finally {
    // The queue stays (pg-boss 10's deleteQueue fails while its partition holds completed jobs):
    // the run's pg-boss schema is dropped at the end.
    await boss.stop();
    await connections.pool.end();
  }
}

/** Resolves once pg-boss has marked `target` jobs of `queue` completed (polled, every 2 ms). */
async function completed(queue: string, target: number): Promise<void> {
  const deadline = Date.now() + RUN_TIMEOUT_MS;
  for (;;) {
    const { rows } = await admin.query<{ n: string }>(
      `SELECT count(*) AS n FROM "${BOSS_SCHEMA}".job WHERE name = $1 AND state = 'completed'`,
      [queue],
    );
    if (Number(rows[0]?.n ?? 0) >= target) return;
    if (Date.now() > deadline) throw new Error(`pg-boss completed ${rows[0]?.n ?? 0} of ${target} jobs`);
    await sleep(2);
  }
}

/**
 * Starts the bench's pg-boss worker on `queue`: batchSize {@link CONCURRENCY}, the same trivial work
 * on each job of a batch; unless `paced`, a full batch makes it fetch again at once. Resolves to its
 * id.
 */
async function startPgBossWorker(
  boss: PgBoss,
  queue: string,
  handled: Counter,
  paced: boolean,
): Promise<string> {
  let workerId = '';
  workerId = await boss.work<PayloadOf<typeof PlaceOrder>>(
    queue,
    { batchSize: CONCURRENCY, pollingIntervalSeconds: PGBOSS_MIN_POLL_S },
    async (jobs) => {
      await Promise.all(
        jobs.map((job) => {
          if (job.data.amount <= 0) throw new Error('unreachable');
          handled.hit();
          return Promise.resolve();
        }),
      );
      if (!paced && jobs.length === CONCURRENCY) boss.notifyWorker(workerId);
    },
  );
  return workerId;
}

async function pgBossThroughput(n: number, round: string, paced: boolean): Promise<Throughput> {
  return withPgBoss(`pgboss-bench-${round}`, async (boss, queue, connections) => {
    const handled = new Counter(RUN_TIMEOUT_MS);
    const workerId = await startPgBossWorker(boss, queue, handled, paced);
    return timeThroughput(
      n,
      connections,
      async (i) => {
        await boss.send(queue, payloadOf(i));
        if (!paced) boss.notifyWorker(workerId);
      },
      async (target) => {
        await handled.until(target);
        await completed(queue, target);
      },
    );
  });
}

/** pg-boss (unpaced) consuming N jobs that `boss.insert` put in its queue first. */
async function pgBossConsume(n: number, round: string): Promise<Throughput> {
  return withPgBoss(`pgboss-bench-consume-${round}`, async (boss, queue, connections) => {
    for (let from = 0; from < n; from += PREFILL_CHUNK) {
      const jobs = [];
      for (let i = from; i < Math.min(n, from + PREFILL_CHUNK); i++)
        jobs.push({ name: queue, data: payloadOf(i) });
      await boss.insert(jobs);
    }
    const handled = new Counter(RUN_TIMEOUT_MS);
    return timeConsume(
      n,
      connections,
      () => startPgBossWorker(boss, queue, handled, false),
      async (target) => {
        await handled.until(target);
        await completed(queue, target);
      },
    );
  });
}

async function pgBossLatency(n: number, round: string, pollingIntervalSeconds: number): Promise<Latencies> {
  return withPgBoss(`pgboss-bench-latency-${round}`, async (boss, queue) => {
    const handled = new Counter(RUN_TIMEOUT_MS);
    await boss.work<{ seq: number }>(queue, { batchSize: 1, pollingIntervalSeconds }, (jobs) => {
      for (const job of jobs) entered.set(job.data.seq, performance.now());
      // Counted when the handler returns: pg-boss's complete runs after it, not awaited.
      for (let i = 0; i < jobs.length; i++) handled.hit();
      return Promise.resolve();
    });
    return timeLatency(n, pollingIntervalSeconds * 1000, (seq) => boss.send(queue, { seq }), handled);
  });
}

/** The p-th percentile (0..100) of some samples, nearest rank. */
function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return (
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN
  );
}

const loadAverage = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const ms = (value: number): string => value.toFixed(value < 10 ? 2 : 0);
const us = (value: number): string => (Number.isNaN(value) ? 'n/a' : value.toFixed(0));

async function main(): Promise<void> {
  try {
    await admin.query('SELECT 1');
  } catch (error) {
    process.stderr.write(
      `PostgreSQL is not reachable at ${describePostgresUrl(DATABASE_URL)} (${String(error)}): start one or set DATABASE_URL to a running server\n`,
    );
    process.exitCode = 2;
    await admin.end();
    return;
  }
  const { rows } = await admin.query<{ v: string }>("SELECT current_setting('server_version') AS v");
  sampler = await PostgresCpu.open(admin);
  console.log(
    `Harrier PostgresBroker vs pg-boss — Node ${process.version} (${process.platform}/${process.arch}, ${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} CPUs), PostgreSQL ${rows[0]?.v ?? '?'} at ${describePostgresUrl(DATABASE_URL)} (${FROM_ENV ? 'DATABASE_URL' : 'the local default; set DATABASE_URL for another'})`,
  );
  console.log(
    `Throughput: N = ${N} (polling pg-boss ${PACED_N}) after a ${WARM_UP}-message warm-up, ${PRODUCERS} senders, concurrency / batchSize ${CONCURRENCY}; latency: ${LATENCY_N} single messages per system; ${ROUNDS} rounds`,
  );
  console.log(
    sampler === undefined
      ? 'Database CPU: n/a (the server is not on this machine)'
      : "Database CPU: /proc of the server's processes (own backends + background)",
  );
  console.log(`Load average at start: ${loadAverage()}\n`);

  const began = performance.now();
  const ours: Throughput[] = [];
  const unpaced: Throughput[] = [];
  const paced: Throughput[] = [];
  const consumeOurs: Throughput[] = [];
  const consumeBoss: Throughput[] = [];
  const latency = { harrier: [] as Latencies[], boss: [] as Latencies[], bossMin: [] as Latencies[] };
  try {
    await harrierThroughput(WARM_UP, 'warm-up');
    await pgBossThroughput(WARM_UP, 'warm-up', false);
    for (let round = 1; round <= ROUNDS; round++) {
      // Alternating, and in the other order every other round, so drift in the host hits both.
      const r = String(round);
      if (round % 2 === 1) {
        ours.push(await harrierThroughput(N, r));
        unpaced.push(await pgBossThroughput(N, r, false));
      } else {
        unpaced.push(await pgBossThroughput(N, r, false));
        ours.push(await harrierThroughput(N, r));
      }
      paced.push(await pgBossThroughput(PACED_N, `${r}-paced`, true));
      if (round % 2 === 1) {
        consumeOurs.push(await harrierConsume(N, r));
        consumeBoss.push(await pgBossConsume(N, r));
      } else {
        consumeBoss.push(await pgBossConsume(N, r));
        consumeOurs.push(await harrierConsume(N, r));
      }
    }
    const share = (total: number, round: number): number =>
      Math.floor(total / ROUNDS) + (round <= total % ROUNDS ? 1 : 0);
    const slow = Math.max(ROUNDS, Math.round(LATENCY_N / 4));
    for (let round = 1; round <= ROUNDS; round++) {
      const r = String(round);
      latency.harrier.push(await harrierLatency(share(LATENCY_N, round), r));
      latency.bossMin.push(await pgBossLatency(share(LATENCY_N, round), r, PGBOSS_MIN_POLL_S));
      latency.boss.push(await pgBossLatency(share(slow, round), r, PGBOSS_DEFAULT_POLL_S));
    }
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS "${BOSS_SCHEMA}" CASCADE`);
  }

  const rowOf = (label: string, samples: Throughput[], send = true): string[] => [
    label,
    fmtRate(median(samples.map((s) => s.rate))),
    samples.map((s) => fmtRate(s.rate)).join(' / '),
    ...(send ? [fmtRate(median(samples.map((s) => s.sendRate)))] : []),
    us(median(samples.map((s) => s.dbUs))),
    us(median(samples.map((s) => s.dbBackgroundUs))),
    us(median(samples.map((s) => s.clientUs))),
    us(median(samples.map((s) => s.dbUs + s.clientUs))),
    median(samples.map((s) => s.statements)).toFixed(2),
  ];
  console.log('send -> handle -> ack (median of the rounds):');
  console.log(
    table(
      [
        'system',
        'msg/s',
        'rounds',
        'send msg/s',
        'DB CPU us/msg',
        'of which background',
        'Node CPU us/msg',
        'both',
        'statements/msg',
      ],
      [
        rowOf('Harrier PostgresBroker', ours),
        rowOf('pg-boss, unpaced', unpaced),
        rowOf(`pg-boss, polling ${PGBOSS_MIN_POLL_S} s (N = ${PACED_N})`, paced),
      ],
    ),
  );
  console.log(`\nConsume ${N} messages put in the queue first (median of the rounds):`);
  console.log(
    table(
      [
        'system',
        'msg/s',
        'rounds',
        'DB CPU us/msg',
        'of which background',
        'Node CPU us/msg',
        'both',
        'statements/msg',
      ],
      [rowOf('Harrier PostgresBroker', consumeOurs, false), rowOf('pg-boss, unpaced', consumeBoss, false)],
    ),
  );
  const others = [...ours, ...unpaced, ...paced, ...consumeOurs, ...consumeBoss].reduce(
    (sum, s) => sum + (s.db?.others ?? 0),
    0,
  );
  if (others > 0) {
    console.log(
      `(other clients' backends used ${(others / 1000).toFixed(0)} ms of CPU during the throughput runs: load that was not the bench's)`,
    );
  }

  const latencyRow = (label: string, rounds: Latencies[]): string[] => {
    const all = rounds.flatMap((l) => l.fromCommit);
    const call = rounds.flatMap((l) => l.fromCall);
    return [
      label,
      String(all.length),
      ms(percentile(all, 50)),
      ms(percentile(all, 99)),
      ms(Math.max(...all)),
      rounds.map((l) => ms(percentile(l.fromCommit, 50))).join(' / '),
      ms(percentile(call, 50)),
    ];
  };
  console.log('\nHand-off latency on an idle system, send resolved (committed) -> handler entry, ms:');
  console.log(
    table(
      ['system', 'messages', 'p50', 'p99', 'max', 'p50 by round', 'p50 from send call'],
      [
        latencyRow('Harrier PostgresBroker (LISTEN/NOTIFY)', latency.harrier),
        latencyRow(`pg-boss, polling ${PGBOSS_MIN_POLL_S} s (its minimum)`, latency.bossMin),
        latencyRow(`pg-boss, polling ${PGBOSS_DEFAULT_POLL_S} s (its default)`, latency.boss),
      ],
    ),
  );

  const ratio = median(ours.map((s) => s.rate)) / median(unpaced.map((s) => s.rate));
  const byRound = ours.map((s, i) => (s.rate / (unpaced[i]?.rate ?? Number.NaN)).toFixed(2)).join(' ');
  console.log(
    `\nTarget Harrier >= 1.5x pg-boss's throughput (unpaced): ${ratio >= 1.5 ? 'met' : 'NOT met'} (${ratio.toFixed(2)}x; every round ${byRound}; the polling pg-boss: ${(median(ours.map((s) => s.rate)) / median(paced.map((s) => s.rate))).toFixed(0)}x)`,
  );
  const p50 = percentile(
    latency.harrier.flatMap((l) => l.fromCommit),
    50,
  );
  const consumeRatio = median(consumeOurs.map((s) => s.rate)) / median(consumeBoss.map((s) => s.rate));
  console.log(
    `Consume alone: Harrier ${consumeRatio.toFixed(2)}x pg-boss (unpaced) by rate, ${(median(consumeBoss.map((s) => s.dbUs)) / median(consumeOurs.map((s) => s.dbUs))).toFixed(2)}x by database CPU per message`,
  );
  console.log(`Target Harrier hand-off p50 <= 10 ms: ${p50 <= 10 ? 'met' : 'NOT met'} (${ms(p50)} ms)`);
  console.log(`Load average at the end: ${loadAverage()}`);
  console.log(`Total ${((performance.now() - began) / 1000).toFixed(1)} s`);
  await admin.end();
}

await main();
