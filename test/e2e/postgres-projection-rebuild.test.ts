/**
 * Projection rebuilds that are cut short or come from outside, with a real PostgreSQL and Redis: a
 * read model in PostgreSQL (`counts`, every event increments, so an event applied twice or a row of
 * the old read model left shows) fed by a RedisEventLog, in worker processes
 * (fixtures/pg-projection-worker.ts).
 *
 * - A worker rebuilding the projection is SIGKILLed after its checkpoints were removed and while
 *   its reset() runs (half the old read model deleted): the restarted worker finds the rebuild
 *   marker, runs reset() again, and the read model equals a clean rebuild's.
 * - A rebuild asked from outside while a worker projects (the checkpoint store's reset, or
 *   `harrier projections rebuild`) is noticed by the worker, which never commits a checkpoint of the
 *   old generation over the new one, completes the rebuild and ends with the clean read model; with
 *   PostgreSQL checkpoints in postgresUnitOfWork and with Redis checkpoints.
 */
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { run } from '../../src/cli/index.js';
import type { CliIo } from '../../src/cli/cli-io.js';
import type { CheckpointStore } from '../../src/log/checkpoint-store.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresCheckpointStore } from '../../src/postgres/postgres-checkpoint-store.js';
import { RedisCheckpointStore } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';
import { WorkerProcesses, type Worker } from '../helpers/worker-processes.js';
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

describe('a PostgreSQL projection rebuilt', () => {
  let schema: string;
  let prefix: string;
  let expected: ReadModel;
  let ends: number[];
  let stores: CheckpointStore[];

  beforeEach(async () => {
    schema = freshSchema();
    prefix = freshPrefix();
    stores = [];
    await migratePostgres(pool, { schema });
    await createCounts(pool, schema);
    // The stream, appended before any worker runs; the expected read model is a clean build's.
    ({ expected, ends } = await appendTally(redisUrl, prefix));
  });

  afterEach(async () => {
    await workers.killAll();
    for (const store of stores) await store.close();
    await dropSchema(pool, schema);
    await deleteKeys(redis.client, prefix);
  });

  function envOf(extra: Record<string, string> = {}): Record<string, string> {
    return {
      REDIS_URL: redisUrl,
      HARRIER_PREFIX: prefix,
      DATABASE_URL: databaseUrl,
      SCHEMA: schema,
      UNIT: '1',
      HANDLE_MS: '5',
      ...extra,
    };
  }

  function storeOf(kind: 'postgres' | 'redis'): CheckpointStore {
    const store =
      kind === 'postgres'
        ? new PostgresCheckpointStore({ connection: pool, schema })
        : new RedisCheckpointStore({ connection: redisUrl, prefix });
    stores.push(store);
    return store;
  }

  /** Whether every partition's checkpoint is at the end of the log. */
  async function atEnd(store: CheckpointStore): Promise<boolean> {
    const checkpoints = await store.list(PROJECTION);
    return ends.every((end, p) => checkpoints.some((c) => c.partition === p && c.offset === end - 1));
  }

  it('by a worker killed with SIGKILL during reset(): the restarted worker completes the rebuild', async () => {
    const store = storeOf('postgres');
    const first = await workers.start(envOf());
    await waitFor('the first build to reach the end of the log', () => atEnd(store), {
      timeoutMs: 60_000,
      explain: () => first.output(),
    });
    await workers.kill(first);
    expect(await readModel(pool, schema)).toEqual(expected);

    const rebuilding = await workers.start(envOf({ REBUILD: '1', RESET_HANG: '1' }), '"resetting":true');
    await workers.kill(rebuilding);
    // Killed with the checkpoints gone and the old read model half there: the marker says so.
    const marked = await store.generation(PROJECTION);
    expect(marked.rebuild).toBeDefined();
    expect(await store.list(PROJECTION)).toEqual([]);
    const left = await counted(pool, schema);
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThan(EVENTS);

    const restarted = await workers.start(envOf());
    await waitFor('the rebuild to reach the end of the log', () => atEnd(store), {
      timeoutMs: 60_000,
      explain: () => restarted.output(),
    });
    await workers.kill(restarted);
    expect(restarted.output()).toContain('rebuild marker set');
    expect(await readModel(pool, schema)).toEqual(expected);
    expect(await counted(pool, schema)).toBe(EVENTS);
    expect(await store.generation(PROJECTION)).toEqual({
      projection: PROJECTION,
      generation: marked.generation + 1,
      rebuild: undefined,
    });
  }, 180_000);

  /**
   * Waits until the worker completed the rebuild asked from outside and reached the end again;
   * meanwhile, whenever the marker is set, no checkpoint may be stored (a commit of the old
   * generation would put one back).
   */
  async function expectCompleted(store: CheckpointStore, worker: Worker, generation: number): Promise<void> {
    await waitFor(
      'the worker to complete the rebuild and reach the end of the log',
      async () => {
        // The checkpoints first: a marker still set after them was set when they were read.
        const checkpoints = await store.list(PROJECTION);
        const state = await store.generation(PROJECTION);
        if (state.rebuild !== undefined) {
          expect(state.generation).toBeGreaterThanOrEqual(generation);
          expect(checkpoints).toEqual([]);
          return false;
        }
        return atEnd(store);
      },
      { timeoutMs: 90_000, explain: () => worker.output() },
    );
    await workers.kill(worker);
    expect(worker.output()).toContain('rebuilt or reset elsewhere');
    expect(await readModel(pool, schema)).toEqual(expected);
    expect(await counted(pool, schema)).toBe(EVENTS);
    expect(await store.generation(PROJECTION)).toEqual({
      projection: PROJECTION,
      generation: generation + 1,
      rebuild: undefined,
    });
  }

  it('from outside while a worker projects in postgresUnitOfWork: no stale checkpoint, a clean read model', async () => {
    const store = storeOf('postgres');
    const worker = await workers.start(envOf({ HANDLE_MS: '20' }));
    await waitFor('the worker to count 150 events', async () => (await counted(pool, schema)) >= 150, {
      timeoutMs: 60_000,
      explain: () => worker.output(),
    });
    await store.reset(PROJECTION);
    const { generation } = await store.generation(PROJECTION);
    // Still projecting at the old generation: its writes and checkpoints roll back from now on.
    expect(await counted(pool, schema)).toBeLessThan(EVENTS);
    await expectCompleted(store, worker, generation);
  }, 180_000);

  it('from outside with `harrier projections rebuild` while a worker projects with Redis checkpoints', async () => {
    const store = storeOf('redis');
    const worker = await workers.start(envOf({ UNIT: '0', CHECKPOINTS: 'redis', HANDLE_MS: '20' }));
    await waitFor('the worker to count 150 events', async () => (await counted(pool, schema)) >= 150, {
      timeoutMs: 60_000,
      explain: () => worker.output(),
    });
    let stdout = '';
    const io: CliIo = {
      stdout: { write: (text: string) => (stdout += text), isTTY: false },
      stderr: { write: () => true },
      stdin: new PassThrough(),
      env: { REDIS_URL: redisUrl },
    };
    expect(await run(['projections', 'rebuild', PROJECTION, '--prefix', prefix], io)).toBe(0);
    const asked = JSON.parse(stdout) as { generation: number; rebuildId: string | null };
    expect(asked.rebuildId).toEqual(expect.any(String));
    expect(await counted(pool, schema)).toBeLessThan(EVENTS);
    await expectCompleted(store, worker, asked.generation);
  }, 180_000);
});
