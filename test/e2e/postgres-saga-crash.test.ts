/**
 * A saga step in postgresUnitOfWork killed with SIGKILL after its writes and before its commit
 * (DESIGN.md guarantees 9 and 10): the step's state change, the row it wrote and the command it
 * sent (an outbox row) are all invisible until the commit, so the killed step left none of them,
 * and the worker that takes the message over applies the step exactly once.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { createBus, sagaStateOf, silentLogger, type MessageBus } from '../../src/index.js';
import { PostgresSagaStore, migratePostgres } from '../../src/postgres/index.js';
import { BullMqBroker, openRedisAdmin, type RedisAdmin } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, useSharedRedis } from '../helpers/redis.js';
import { WorkerProcesses } from '../helpers/worker-processes.js';
import { jobsLeft } from './fixtures/saga-harness.js';
import { ItemPacked, PACKING } from './fixtures/pg-saga-messages.js';

const WORKER = fileURLToPath(new URL('./fixtures/pg-saga-worker.ts', import.meta.url));

const redisUrl = inject('redisUrl');
const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const redis = useSharedRedis(redisUrl);

const workers = new WorkerProcesses(WORKER, 'the saga worker');

describe('a saga step in postgresUnitOfWork killed with SIGKILL before its commit', () => {
  let schema: string;
  let prefix: string;
  let producer: MessageBus;
  let store: PostgresSagaStore;
  let admin: RedisAdmin;

  beforeEach(async () => {
    schema = freshSchema();
    prefix = `{pg-saga-crash-${randomUUID().slice(0, 8)}}`;
    await migratePostgres(pool, { schema });
    await pool.query(
      `CREATE TABLE "${schema}".packed (order_id text NOT NULL, item text NOT NULL, message_id text NOT NULL)`,
    );
    producer = createBus({
      endpoint: 'pgsc-producer',
      broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
      definitions: [ItemPacked],
      logger: silentLogger,
    });
    await producer.start();
    store = new PostgresSagaStore({ connection: pool, schema });
    admin = await openRedisAdmin(redisUrl, { prefix });
  });

  afterEach(async () => {
    await workers.killAll();
    await producer.stop();
    await store.close();
    await admin.close();
    await dropSchema(pool, schema);
    await deleteKeys(redis.client, prefix);
  });

  async function count(table: string, where = 'true'): Promise<number> {
    const result = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".${table} WHERE ${where}`,
    );
    return result.rows[0]?.n ?? 0;
  }

  async function packing(): Promise<{ version: number; items: number } | undefined> {
    const found = await store.get(PACKING, 'o-1');
    return found && { version: found.version, items: sagaStateOf<{ items: number }>(found).items };
  }

  it('leaves none of its writes, and the next worker applies the step exactly once', async () => {
    const env = { REDIS_URL: redisUrl, HARRIER_PREFIX: prefix, DATABASE_URL: databaseUrl, SCHEMA: schema };
    const first = await workers.start({ ...env, BLOCK_ITEM: 'b' });
    await producer.publish(ItemPacked, { order: 'o-1', item: 'a' });
    await waitFor('the first step to commit', async () => (await packing())?.version === 1, {
      timeoutMs: 20_000,
      explain: () => first.output(),
    });
    await producer.publish(ItemPacked, { order: 'o-1', item: 'b' });
    await waitFor(
      'the second step to block after its writes',
      () => first.output().includes('"blocked":"b"'),
      {
        timeoutMs: 20_000,
        explain: () => first.output(),
      },
    );
    // Written in the open transaction, visible to no one.
    expect(await packing()).toEqual({ version: 1, items: 1 });
    expect(await count('packed')).toBe(1);
    expect(await count('outbox')).toBe(1);
    expect(await count('inbox')).toBe(1);

    await workers.kill(first);
    // PostgreSQL rolled the killed session's transaction back: still nothing of the second step.
    expect(await packing()).toEqual({ version: 1, items: 1 });
    expect(await count('packed', `item = 'b'`)).toBe(0);

    const second = await workers.start(env);
    await waitFor(
      'the second step to commit and every queue to drain',
      async () => (await packing())?.version === 2 && (await jobsLeft(admin)) === 0,
      { timeoutMs: 30_000, explain: () => second.output() },
    );
    expect(await packing()).toEqual({ version: 2, items: 2 });
    expect(await count('packed', `item = 'a'`)).toBe(1);
    expect(await count('packed', `item = 'b'`)).toBe(1);
    // One ShipItem per step, each sent once (the outbox rows the relay publishes).
    expect(await count('outbox', `type = 'pgsc.ShipItem'`)).toBe(2);
    expect(await count('inbox')).toBe(2);
  }, 90_000);
});
