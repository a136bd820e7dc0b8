/**
 * Fault tests of the PostgreSQL outbox: application and relay processes killed with SIGKILL at the
 * worst moment, against the tests' real PostgreSQL and Redis (neither is killed here). Every
 * process is a child running a fixture of test/e2e/fixtures/pg-outbox-*.ts.
 */
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  CommandHandler,
  EventHandler,
  createBus,
  silentLogger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { startOutboxRelay } from '../../src/postgres/outbox-relay.js';
import { PostgresOutbox } from '../../src/postgres/postgres-outbox.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';
import { WorkerProcesses, type Worker } from '../helpers/worker-processes.js';
import { OrderPlaced, PARTITIONS, PostEntry } from './fixtures/pg-outbox-messages.js';

const databaseUrl = inject('databaseUrl');
const redisUrl = inject('redisUrl');
const { pool } = useSharedPostgres(databaseUrl);

const fixtures = new WorkerProcesses(fileURLToPath(new URL('./fixtures/pg-outbox-app.ts', import.meta.url)));
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  await fixtures.killAll();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Starts `node --import tsx <fixture>` with `env` added to this process's environment. */
function startFixture(fixture: string, env: Record<string, string>): Worker {
  return fixtures.launch(env, fileURLToPath(new URL(`./fixtures/${fixture}`, import.meta.url)));
}

/** A fresh schema and prefix, with the consumer bus a test's handlers run on. */
async function environment(handlers: NonNullable<Parameters<typeof createBus>[0]>['handlers']) {
  const schema = freshSchema();
  const prefix = freshPrefix();
  await migratePostgres(pool, { schema });
  await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY)`);
  const consumer: MessageBus = createBus({
    endpoint: 'consumer',
    broker: new BullMqBroker({ connection: redisUrl, prefix, partitions: PARTITIONS, logger: silentLogger }),
    handlers: handlers ?? [],
    logger: silentLogger,
  });
  await consumer.start();
  cleanups.push(async () => {
    await consumer.stop({ gracePeriodMs: 200 });
    const redis = new Redis(redisUrl);
    await deleteKeys(redis, prefix);
    redis.disconnect();
    await dropSchema(pool, schema);
  });
  const env = { DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, SCHEMA: schema, PREFIX: prefix };
  return { schema, prefix, consumer, env };
}

async function outboxRows(schema: string): Promise<number> {
  const result = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".outbox`);
  return result.rows[0]?.n ?? -1;
}

describe('PostgreSQL outbox faults', () => {
  describe('when the application is killed with SIGKILL right after its transaction commits', () => {
    it('loses nothing: a relay publishes every committed message once (10 runs)', async () => {
      const handled: string[] = [];
      @EventHandler(OrderPlaced)
      class Shipping {
        handle(payload: PayloadOf<typeof OrderPlaced>) {
          handled.push(payload.orderId);
        }
      }
      const { schema, consumer, env } = await environment([Shipping]);
      const runs = Array.from({ length: 10 }, (_, i) => `order-${i}`);
      // Two at a time (the machine has two cores); each is its own process and transaction.
      for (let i = 0; i < runs.length; i += 2) {
        await Promise.all(
          runs.slice(i, i + 2).map(async (run) => {
            const app = startFixture('pg-outbox-app.ts', { ...env, RUN: run, COUNT: '3' });
            await app.exited();
            expect(app.child.signalCode, app.output()).toBe('SIGKILL');
          }),
        );
      }
      // Every transaction committed, and nothing was published before the kill.
      const orders = await pool.query<{ id: string }>(`SELECT id FROM "${schema}".orders ORDER BY id`);
      expect(orders.rows.map((row) => row.id)).toEqual([...runs].sort());
      expect(await outboxRows(schema)).toBe(30);
      expect(handled).toEqual([]);

      const relay = await startOutboxRelay({
        connection: pool,
        publisher: consumer.publisher,
        schema,
        logger: silentLogger,
      });
      cleanups.push(() => relay.stop());
      const expected = runs.flatMap((run) => [0, 1, 2].map((i) => `${run}-${i}`)).sort();
      await waitFor('every committed event', () => handled.length >= expected.length, {
        timeoutMs: 15_000,
        explain: () => `handled ${handled.length}`,
      });
      await waitFor('an empty outbox', async () => (await outboxRows(schema)) === 0, { timeoutMs: 10_000 });
      await consumer.publish(OrderPlaced, { orderId: 'marker' });
      await waitFor('the marker', () => handled.includes('marker'), { timeoutMs: 10_000 });
      expect(handled.filter((id) => id !== 'marker').sort()).toEqual(expected);
    }, 120_000);
  });

  describe('when one of two relays is killed with SIGKILL mid-batch', () => {
    it('loses nothing, absorbs the republished batch and keeps per-key order', async () => {
      const handled: { id: string; account: string; n: number }[] = [];
      @CommandHandler(PostEntry)
      class Ledger {
        handle(payload: PayloadOf<typeof PostEntry>, ctx: MessageContext) {
          handled.push({ id: ctx.messageId, ...payload });
        }
      }
      const { schema, consumer, env } = await environment([Ledger]);
      const outbox = new PostgresOutbox(consumer, { schema });
      const accounts = ['a1', 'a2', 'a3', 'a4', 'a5', 'a6'];
      const perAccount = 40;
      for (let t = 0; t < perAccount / 5; t++) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          for (const account of accounts) {
            for (let i = 0; i < 5; i++) await outbox.send(client, PostEntry, { account, n: t * 5 + i });
          }
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      }
      const total = accounts.length * perAccount;
      const relayEnv = { ...env, BATCH_SIZE: '10', PAUSE_MS: '150', REBALANCE_MS: '200' };
      // The victim waits 30 s between its first publish and its commit, so the kill lands mid-batch
      // however slow the machine is.
      const victim = startFixture('pg-outbox-relay.ts', { ...relayEnv, PAUSE_MS: '30000' });
      const survivor = startFixture('pg-outbox-relay.ts', relayEnv);
      await waitFor(
        'both relays to start',
        () => victim.output().includes('"ready":true') && survivor.output().includes('"ready":true'),
        { timeoutMs: 20_000, explain: () => victim.output() + survivor.output() },
      );
      // Its first publish is done and its rows are not removed yet: mid-batch.
      await waitFor('the victim to publish a batch', () => victim.output().includes('"published"'), {
        timeoutMs: 20_000,
        explain: () => victim.output(),
      });
      victim.child.kill('SIGKILL');
      await victim.exited();

      await waitFor('every command', () => new Set(handled.map((h) => h.id)).size === total, {
        timeoutMs: 30_000,
        explain: () => `handled ${handled.length} of ${total}; survivor: ${survivor.output()}`,
      });
      await waitFor('an empty outbox', async () => (await outboxRows(schema)) === 0, { timeoutMs: 10_000 });
      // A copy of the killed batch, republished by the survivor, would be queued ahead of this one.
      await consumer.send(PostEntry, { account: 'a1', n: perAccount });
      await waitFor('the marker', () => handled.some((h) => h.account === 'a1' && h.n === perAccount), {
        timeoutMs: 10_000,
      });
      // The victim was killed before its first commit, so the survivor published every row, the
      // victim's published batch among them a second time: the broker's dedupe absorbed it.
      const published = (child: Worker): number =>
        child
          .output()
          .split('\n')
          .filter((line) => line.startsWith('{"published"'))
          .reduce((sum, line) => sum + (JSON.parse(line) as { published: number }).published, 0);
      expect(published(victim)).toBeGreaterThan(0);
      expect(published(survivor)).toBe(total);
      expect(handled).toHaveLength(total + 1);
      for (const account of accounts) {
        const ns = handled.filter((h) => h.account === account).map((h) => h.n);
        const expected = Array.from({ length: perAccount }, (_, i) => i);
        expect(ns).toEqual(account === 'a1' ? [...expected, perAccount] : expected);
      }
    }, 90_000);
  });
});
