/**
 * Exactly-once projections on PostgreSQL (issue 13 item 3): a projection whose read model and
 * checkpoints live in PostgreSQL, run in postgresUnitOfWork and fed by a RedisEventLog, is killed
 * with SIGKILL mid-stream and restarted, twice; the read model equals the one a single run builds
 * (every event increments its key's counter, so an event applied twice or skipped shows). A control
 * run without the unit shows the same crash applies events twice.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { createBus, silentLogger } from '../../src/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { RedisEventLog } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';
import { Counted, PROJECTION, TALLY_TOPIC } from './fixtures/pg-projection-messages.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const WORKER = fileURLToPath(new URL('./fixtures/pg-projection-worker.ts', import.meta.url));
const EVENTS = 600;
const KEYS = 24;

const redisUrl = inject('redisUrl');
const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const redis = useSharedRedis(redisUrl);

interface Worker {
  readonly child: ChildProcess;
  output(): string;
}

const running = new Set<ChildProcess>();

function exitOf(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) =>
    child.once('exit', () => {
      resolve();
    }),
  );
}

async function startWorker(env: Record<string, string>): Promise<Worker> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-8_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  await waitFor(
    'the projection worker to be ready',
    () => output.includes('"ready":true') || child.exitCode !== null,
    { timeoutMs: 30_000, explain: () => output },
  );
  if (!output.includes('"ready":true')) throw new Error(`The worker exited before it was ready:\n${output}`);
  return { child, output: () => output };
}

async function kill(worker: Worker): Promise<void> {
  worker.child.kill('SIGKILL');
  await exitOf(worker.child);
  running.delete(worker.child);
}

/** How many events the read model counted so far (doubles included). */
async function counted(schema: string): Promise<number> {
  const result = await pool.query<{ n: string | null }>(`SELECT sum(n) AS n FROM "${schema}".counts`);
  return Number(result.rows[0]?.n ?? 0);
}

async function readModel(schema: string): Promise<Record<string, { n: number; total: number }>> {
  const result = await pool.query<{ key: string; n: number; total: string }>(
    `SELECT key, n, total FROM "${schema}".counts ORDER BY key`,
  );
  return Object.fromEntries(result.rows.map((r) => [r.key, { n: r.n, total: Number(r.total) }]));
}

describe('a PostgreSQL projection killed with SIGKILL mid-stream', () => {
  let schema: string;
  let prefix: string;
  let expected: Record<string, { n: number; total: number }>;
  let ends: number[];

  beforeEach(async () => {
    schema = freshSchema();
    prefix = freshPrefix();
    await migratePostgres(pool, { schema });
    await pool.query(
      `CREATE TABLE "${schema}".counts (key text PRIMARY KEY, n integer NOT NULL, total bigint NOT NULL)`,
    );
    // The stream: appended by a producer bus before any worker runs. The expected read model is the
    // one a single run builds: per key, its event count and the sum of its amounts.
    const log = new RedisEventLog({ connection: redisUrl, prefix, topics: [TALLY_TOPIC] });
    const producer = createBus({
      endpoint: 'tally-producer',
      definitions: [Counted],
      eventLog: log,
      logger: silentLogger,
    });
    expected = {};
    for (let i = 0; i < EVENTS; i++) {
      const key = `k${String(i % KEYS).padStart(2, '0')}`;
      const amount = (i % 7) + 1;
      await producer.publish(Counted, { key, amount });
      const entry = (expected[key] ??= { n: 0, total: 0 });
      entry.n++;
      entry.total += amount;
    }
    ends = [];
    for (let p = 0; p < TALLY_TOPIC.partitions; p++) ends.push(await log.endOffset(TALLY_TOPIC.name, p));
    await producer.stop();
    await log.close();
  });

  afterEach(async () => {
    for (const child of running) child.kill('SIGKILL');
    await Promise.all([...running].map(exitOf));
    running.clear();
    await dropSchema(pool, schema);
    await deleteKeys(redis.client, prefix);
  });

  /** Runs the worker, SIGKILLs it once `counted` reaches each of `killAt`, then lets a last run finish. */
  async function crashAndFinish(unit: '1' | '0', killAt: readonly number[]): Promise<number[]> {
    const env = {
      REDIS_URL: redisUrl,
      HARRIER_PREFIX: prefix,
      DATABASE_URL: databaseUrl,
      SCHEMA: schema,
      UNIT: unit,
      // Slow enough that a kill lands mid-stream on a fast machine too (at most 200 events/s per partition).
      HANDLE_MS: '5',
    };
    const countedAtKill: number[] = [];
    for (const target of killAt) {
      const worker = await startWorker(env);
      await waitFor(
        `the projection to count ${target} events`,
        async () => (await counted(schema)) >= target,
        {
          timeoutMs: 60_000,
          explain: () => worker.output(),
        },
      );
      await kill(worker);
      countedAtKill.push(await counted(schema));
    }
    const last = await startWorker(env);
    await waitFor(
      'every partition checkpoint to reach the end of the log',
      async () => {
        const rows = await pool.query<{ partition: number; offset: string }>(
          `SELECT partition, "offset" FROM "${schema}".checkpoints WHERE projection = $1`,
          [PROJECTION],
        );
        return ends.every((end, p) =>
          rows.rows.some((r) => r.partition === p && Number(r.offset) === end - 1),
        );
      },
      { timeoutMs: 90_000, explain: () => last.output() },
    );
    await kill(last);
    return countedAtKill;
  }

  it('in postgresUnitOfWork: restarted twice, the read model equals a single run (each event applied once)', async () => {
    const countedAtKill = await crashAndFinish('1', [120, 330]);
    // Killed mid-stream both times.
    for (const n of countedAtKill) expect(n).toBeLessThan(EVENTS);
    expect(await readModel(schema)).toEqual(expected);
    expect(await counted(schema)).toBe(EVENTS);
  }, 180_000);

  it('without the unit (the control): the same crash applies events twice', async () => {
    await crashAndFinish('0', [120]);
    expect(await counted(schema)).toBeGreaterThan(EVENTS);
    expect(await readModel(schema)).not.toEqual(expected);
  }, 180_000);
});
