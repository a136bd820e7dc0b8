/**
 * Exactly-once projections on PostgreSQL (issue 13 item 3): a projection whose read model and
 * checkpoints live in PostgreSQL, run in postgresUnitOfWork and fed by a RedisEventLog, is killed
 * with SIGKILL mid-stream and restarted, twice; the read model equals the one a single run builds
 * (every event increments its key's counter, so an event applied twice or skipped shows). A control
 * run without the unit shows the same crash applies events twice.
 */
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';
import { WorkerProcesses } from '../helpers/worker-processes.js';
import {
  appendTally,
  counted,
  createCounts,
  EVENTS,
  readModel,
  type ReadModel,
} from './fixtures/pg-projection-harness.js';
import { PROJECTION } from './fixtures/pg-projection-messages.js';

const WORKER = fileURLToPath(new URL('./fixtures/pg-projection-worker.ts', import.meta.url));

const redisUrl = inject('redisUrl');
const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const redis = useSharedRedis(redisUrl);

const workers = new WorkerProcesses(WORKER, 'the projection worker');

describe('a PostgreSQL projection killed with SIGKILL mid-stream', () => {
  let schema: string;
  let prefix: string;
  let expected: ReadModel;
  let ends: number[];

  beforeEach(async () => {
    schema = freshSchema();
    prefix = freshPrefix();
    await migratePostgres(pool, { schema });
    await createCounts(pool, schema);
    // The stream: appended by a producer bus before any worker runs. The expected read model is the
    // one a single run builds: per key, its event count and the sum of its amounts.
    ({ expected, ends } = await appendTally(redisUrl, prefix));
  });

  afterEach(async () => {
    await workers.killAll();
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
      const worker = await workers.start(env);
      await waitFor(
        `the projection to count ${target} events`,
        async () => (await counted(pool, schema)) >= target,
        {
          timeoutMs: 60_000,
          explain: () => worker.output(),
        },
      );
      await workers.kill(worker);
      countedAtKill.push(await counted(pool, schema));
    }
    const last = await workers.start(env);
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
    await workers.kill(last);
    return countedAtKill;
  }

  it('in postgresUnitOfWork: restarted twice, the read model equals a single run (each event applied once)', async () => {
    const countedAtKill = await crashAndFinish('1', [120, 330]);
    // Killed mid-stream both times.
    for (const n of countedAtKill) expect(n).toBeLessThan(EVENTS);
    expect(await readModel(pool, schema)).toEqual(expected);
    expect(await counted(pool, schema)).toBe(EVENTS);
  }, 180_000);

  it('without the unit (the control): the same crash applies events twice', async () => {
    await crashAndFinish('0', [120]);
    expect(await counted(pool, schema)).toBeGreaterThan(EVENTS);
    expect(await readModel(pool, schema)).not.toEqual(expected);
  }, 180_000);
});
