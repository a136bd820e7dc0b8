import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import type { OutgoingMessage } from '../../src/extend.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import {
  OutboxRelay,
  relayConnection,
  relayLockKeys,
  startOutboxRelay,
  type OutboxRelayOptions,
} from '../../src/postgres/outbox-relay.js';
import { postgresTables } from '../../src/postgres/postgres-schema.js';
import { OUTBOX_LANES } from '../../src/postgres/outbox-rows.js';
import { partitionOf } from '../../src/messages/partition.js';
import { ManualClock } from '../../src/clock/manual-clock.js';
import { PostgresOutbox } from '../../src/postgres/postgres-outbox.js';
import { postgresSession } from '../../src/postgres/postgres-session.js';
import { postgresUnitOfWork } from '../../src/postgres/postgres-unit-of-work.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const databaseUrl = inject('databaseUrl');
const redisUrl = inject('redisUrl');
const { pool } = useSharedPostgres(databaseUrl);
const SIGNING_KEY = randomBytes(32).toString('hex');

const OrderPlaced = defineEvent('pgo.OrderPlaced', { schema: z.object({ orderId: z.string() }) });
const Post = defineCommand('pgo.Post', {
  schema: z.object({ account: z.string(), n: z.number() }),
  partitionKey: 'account',
  ordered: true,
});

interface Setup {
  readonly schema: string;
  readonly prefix: string;
  readonly bus: MessageBus;
  readonly outbox: PostgresOutbox;
  readonly placed: { orderId: string; at: number }[];
  readonly posts: { account: string; n: number }[];
  relay(options?: Partial<OutboxRelayOptions>): Promise<OutboxRelay>;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setUp(): Promise<Setup> {
  const schema = freshSchema();
  await migratePostgres(pool, { schema });
  const prefix = freshPrefix();
  const placed: { orderId: string; at: number }[] = [];
  const posts: { account: string; n: number }[] = [];
  @EventHandler(OrderPlaced)
  class Shipping {
    handle(payload: PayloadOf<typeof OrderPlaced>) {
      placed.push({ orderId: payload.orderId, at: Date.now() });
    }
  }
  @CommandHandler(Post)
  class Ledger {
    handle(payload: PayloadOf<typeof Post>, _ctx: MessageContext) {
      posts.push(payload);
    }
  }
  const bus = createBus({
    endpoint: 'shop',
    broker: new BullMqBroker({ connection: redisUrl, prefix, partitions: 4, logger: silentLogger }),
    handlers: [Shipping, Ledger],
    logger: silentLogger,
    signing: { keys: [SIGNING_KEY] },
  });
  await bus.start();
  const relays: OutboxRelay[] = [];
  cleanups.push(async () => {
    await Promise.all(relays.map((r) => r.stop()));
    await bus.stop({ gracePeriodMs: 200 });
    const redis = new Redis(redisUrl);
    await deleteKeys(redis, prefix);
    redis.disconnect();
    await dropSchema(pool, schema);
  });
  return {
    schema,
    prefix,
    bus,
    outbox: new PostgresOutbox(bus, { schema }),
    placed,
    posts,
    relay: async (options = {}) => {
      const relay = await startOutboxRelay({
        connection: pool,
        publisher: bus.publisher,
        schema,
        logger: silentLogger,
        ...options,
      });
      relays.push(relay);
      return relay;
    },
  };
}

/** Runs `work` in a transaction of its own and commits it (or rolls it back). */
async function inTransaction(
  work: (client: import('pg').PoolClient) => Promise<void>,
  end: 'COMMIT' | 'ROLLBACK' = 'COMMIT',
): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await work(client);
    await client.query(end);
  } finally {
    client.release();
  }
}

async function outboxRows(schema: string): Promise<number> {
  const result = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".outbox`);
  return result.rows[0]?.n ?? -1;
}

const WAIT = { timeoutMs: 10_000 };

describe('PostgresOutbox', () => {
  describe('.publish', () => {
    describe('when the application transaction commits', () => {
      // The consumer bus verifies signatures: an unsigned or mis-signed row would be dead-lettered.
      it('is delivered once through the relay, signed as bus.publish signs', async () => {
        const s = await setUp();
        const relay = await s.relay();
        let id = '';
        await inTransaction(async (client) => {
          id = await s.outbox.publish(client, OrderPlaced, { orderId: 'o-1' });
        });
        await waitFor('the event to be handled', () => s.placed.length === 1, WAIT);
        await waitFor('the row to be removed', async () => (await outboxRows(s.schema)) === 0, WAIT);
        // A second copy would be queued ahead of this marker.
        await s.bus.publish(OrderPlaced, { orderId: 'marker' });
        await waitFor('the marker', () => s.placed.length === 2, WAIT);
        expect(s.placed.map((p) => p.orderId)).toEqual(['o-1', 'marker']);
        await waitFor('the relay to count it', () => relay.stats().published === 1, WAIT);
        expect(id).toMatch(/^[0-9a-f-]{36}$/);
      });
    });

    describe('when the application transaction rolls back', () => {
      it('is never delivered', async () => {
        const s = await setUp();
        const relay = await s.relay();
        await inTransaction(async (client) => {
          await s.outbox.publish(client, OrderPlaced, { orderId: 'rolled-back' });
        }, 'ROLLBACK');
        await inTransaction(async (client) => {
          await s.outbox.publish(client, OrderPlaced, { orderId: 'committed' });
        });
        await waitFor('the committed event', () => s.placed.length === 1, WAIT);
        await s.bus.publish(OrderPlaced, { orderId: 'marker' });
        await waitFor('the marker', () => s.placed.length === 2, WAIT);
        expect(s.placed.map((p) => p.orderId)).toEqual(['committed', 'marker']);
        await waitFor('the relay to count it', () => relay.stats().published === 1, WAIT);
      });
    });

    describe('when the payload is invalid', () => {
      it('throws as bus.publish does and writes nothing', async () => {
        const s = await setUp();
        await expect(
          inTransaction(async (client) => {
            await s.outbox.publish(client, OrderPlaced, { orderId: 7 } as never);
          }),
        ).rejects.toMatchObject({ name: 'MessageValidationError' });
        expect(await outboxRows(s.schema)).toBe(0);
      });
    });

    describe('with deliverAt', () => {
      it('is not handled before that time', async () => {
        const s = await setUp();
        const relay = await s.relay();
        const deliverAt = Date.now() + 1500;
        await inTransaction(async (client) => {
          await s.outbox.publish(
            client,
            OrderPlaced,
            { orderId: 'later' },
            { deliverAt: new Date(deliverAt) },
          );
        });
        await waitFor('the relay to publish it', () => relay.stats().published === 1, WAIT);
        expect(s.placed).toEqual([]);
        await waitFor('the delayed event', () => s.placed.length === 1, WAIT);
        expect(s.placed[0]!.at).toBeGreaterThanOrEqual(deliverAt);
      });
    });
  });

  describe('.send', () => {
    describe('with ordered commands of several keys and two relays', () => {
      it('delivers every command once, in order per key', async () => {
        const s = await setUp();
        const fast = { rebalanceIntervalMs: 100, pollIntervalMs: 200, batchSize: 7 };
        const a = await s.relay(fast);
        const b = await s.relay(fast);
        await waitFor(
          'the two relays to share the lanes',
          () => a.stats().lanes.length === 16 && b.stats().lanes.length === 16,
          WAIT,
        );
        const accounts = ['acc-1', 'acc-2', 'acc-3', 'acc-4', 'acc-5', 'acc-6'];
        const perTransaction = 5;
        for (let t = 0; t < 12; t++) {
          await inTransaction(async (client) => {
            for (const account of accounts) {
              for (let i = 0; i < perTransaction; i++) {
                await s.outbox.send(client, Post, { account, n: t * perTransaction + i });
              }
            }
          });
        }
        const total = 12 * perTransaction * accounts.length;
        await waitFor('every command', () => s.posts.length === total, { timeoutMs: 30_000 });
        for (const account of accounts) {
          const ns = s.posts.filter((p) => p.account === account).map((p) => p.n);
          expect(ns).toEqual(Array.from({ length: 12 * perTransaction }, (_, i) => i));
        }
        await waitFor(
          'the relays to count them',
          () => a.stats().published + b.stats().published === total,
          WAIT,
        );
        expect(a.stats().published).toBeGreaterThan(0);
        expect(b.stats().published).toBeGreaterThan(0);
      });
    });

    describe('when a second relay starts while the first drains a backlog', () => {
      it('gets half the lanes before the backlog is gone, and order per key holds', async () => {
        const s = await setUp();
        const slow = {
          rebalanceIntervalMs: 100,
          batchSize: 10,
          publisher: {
            publish: async (messages: readonly OutgoingMessage[]) => {
              await new Promise((resolve) => setTimeout(resolve, 20));
              await s.bus.publisher.publish(messages);
            },
          },
        };
        const accounts = ['b1', 'b2', 'b3', 'b4', 'b5', 'b6', 'b7', 'b8'];
        await inTransaction(async (client) => {
          for (let n = 0; n < 40; n++) {
            for (const account of accounts) await s.outbox.send(client, Post, { account, n });
          }
        });
        const a = await s.relay(slow);
        await waitFor('a to publish', () => a.stats().published > 0, WAIT);
        const b = await s.relay(slow);
        await waitFor('b to take half the lanes', () => b.stats().lanes.length === 16, WAIT);
        expect(a.stats().lanes).toHaveLength(16);
        expect(await outboxRows(s.schema)).toBeGreaterThan(0);
        await waitFor('every command', () => s.posts.length === 40 * accounts.length, { timeoutMs: 30_000 });
        for (const account of accounts) {
          const ns = s.posts.filter((p) => p.account === account).map((p) => p.n);
          expect(ns).toEqual(Array.from({ length: 40 }, (_, i) => i));
        }
      });
    });

    describe('when a relay stops', () => {
      it('gives its lanes to the relay left', async () => {
        const s = await setUp();
        const fast = { rebalanceIntervalMs: 100, pollIntervalMs: 200 };
        const a = await s.relay(fast);
        const b = await s.relay(fast);
        await waitFor('the lanes to be shared', () => b.stats().lanes.length === 16, WAIT);
        await b.stop();
        await waitFor('a to own every lane', () => a.stats().lanes.length === 32, WAIT);
        await inTransaction(async (client) => {
          for (const account of ['x', 'y', 'z', 'w']) await s.outbox.send(client, Post, { account, n: 1 });
        });
        await waitFor('the commands', () => s.posts.length === 4, WAIT);
      });
    });
  });
});

describe('startOutboxRelay', () => {
  describe('when a row cannot be published (a command with no route)', () => {
    it('holds back only its lane: the other lanes are published, the row waits and is logged', async () => {
      const s = await setUp();
      const Unrouted = defineCommand('rv.Unrouted', { schema: z.object({ n: z.number() }) });
      const warnings: { message: string; fields: Record<string, unknown> }[] = [];
      const logger = {
        ...silentLogger,
        warn: (message: string, fields?: Record<string, unknown>) => {
          warnings.push({ message, fields: fields ?? {} });
        },
      };
      let unroutedId = '';
      await inTransaction(async (client) => {
        unroutedId = await s.outbox.send(client, Unrouted, { n: 1 });
      });
      const unroutedLane = partitionOf(unroutedId, OUTBOX_LANES);
      // 20 events of other keys, none in the unrouted command's lane.
      const keys: string[] = [];
      for (let i = 0; keys.length < 20; i++) {
        if (partitionOf(`other-${i}`, OUTBOX_LANES) !== unroutedLane) keys.push(`other-${i}`);
      }
      await inTransaction(async (client) => {
        for (const key of keys) {
          await s.outbox.publish(client, OrderPlaced, { orderId: key }, { partitionKey: key });
        }
      });
      const relay = await s.relay({ pollIntervalMs: 100, logger });
      await waitFor('the 20 events', () => s.placed.length === 20, WAIT);
      await waitFor('the relay to count them', () => relay.stats().published === 20, WAIT);
      const left = await pool.query<{ message_id: string }>(`SELECT message_id FROM "${s.schema}".outbox`);
      expect(left.rows).toEqual([{ message_id: unroutedId }]);
      await waitFor('the held-back lane to be logged', () => warnings.length > 0, WAIT);
      expect(warnings[0]!.fields).toMatchObject({
        lane: unroutedLane,
        messageId: unroutedId,
        type: 'rv.Unrouted',
      });
      expect(warnings[0]!.fields['error']).toMatch(/route/i);
    });
  });

  describe('with options that once capped its lanes (maxLanes: 8), alone', () => {
    it('owns and publishes every lane: all 64 keys are delivered', async () => {
      const s = await setUp();
      const relay = await s.relay({ maxLanes: 8, pollIntervalMs: 100, rebalanceIntervalMs: 100 } as never);
      await inTransaction(async (client) => {
        for (let k = 0; k < 64; k++) await s.outbox.send(client, Post, { account: `key-${k}`, n: 0 });
      });
      await waitFor('all 64 commands', () => s.posts.length === 64, WAIT);
      expect(relay.stats().lanes).toHaveLength(OUTBOX_LANES);
      await waitFor('the outbox to empty', async () => (await outboxRows(s.schema)) === 0, WAIT);
    });
  });

  describe('with a handler in postgresUnitOfWork', () => {
    it("publishes what the handler recorded in its transaction, after the transaction's writes", async () => {
      const s = await setUp();
      await pool.query(`CREATE TABLE "${s.schema}".orders (id text PRIMARY KEY)`);
      const Place = defineCommand('pgo.Place', { schema: z.object({ orderId: z.string() }) });
      @CommandHandler(Place)
      class PlaceHandler {
        async handle(payload: PayloadOf<typeof Place>, ctx: MessageContext): Promise<void> {
          await postgresSession(ctx).query(`INSERT INTO "${s.schema}".orders (id) VALUES ($1)`, [
            payload.orderId,
          ]);
          ctx.publish(OrderPlaced, { orderId: payload.orderId });
        }
      }
      const unit = postgresUnitOfWork({ connection: pool, schema: s.schema, logger: silentLogger });
      const web = createBus({
        endpoint: 'web',
        broker: new BullMqBroker({
          connection: redisUrl,
          prefix: s.prefix,
          partitions: 4,
          logger: silentLogger,
        }),
        handlers: [PlaceHandler],
        unitOfWork: unit,
        logger: silentLogger,
        signing: { keys: [SIGNING_KEY] },
      });
      cleanups.push(async () => {
        await web.stop({ gracePeriodMs: 200 });
        await unit.close();
      });
      const relay = await s.relay();
      await web.execute(Place, { orderId: 'o-h' });
      await waitFor('the recorded event', () => s.placed.length === 1, WAIT);
      expect(s.placed[0]?.orderId).toBe('o-h');
      const orders = await pool.query(`SELECT id FROM "${s.schema}".orders`);
      expect(orders.rows).toEqual([{ id: 'o-h' }]);
      await waitFor('the relay to count it', () => relay.stats().published === 1, WAIT);
    });
  });

  describe('when a transaction commits', () => {
    it('is woken by NOTIFY long before its poll interval', async () => {
      const s = await setUp();
      const relay = await s.relay({ pollIntervalMs: 60_000, rebalanceIntervalMs: 60_000 });
      await waitFor('the relay to own its lanes', () => relay.stats().lanes.length === 32, WAIT);
      const committed = Date.now();
      await inTransaction(async (client) => {
        await s.outbox.publish(client, OrderPlaced, { orderId: 'o-notify' });
      });
      await waitFor('the relay to publish', () => relay.stats().published === 1, WAIT);
      expect(Date.now() - committed).toBeLessThan(1_000);
    });
  });

  describe('when PostgreSQL drops its session (as a restart does)', () => {
    it('reconnects, takes its lanes again and publishes what commits next', async () => {
      const s = await setUp();
      const relay = await s.relay({ pollIntervalMs: 200, rebalanceIntervalMs: 100 });
      await waitFor('the relay to own its lanes', () => relay.stats().lanes.length === 32, WAIT);
      // The relay's session is the one holding its lane locks; terminate it as a shutdown would.
      const laneKey = relayLockKeys(postgresTables(s.schema)).lanes;
      const laneHolders = async (): Promise<{ pid: number; lanes: number }[]> =>
        (
          await pool.query<{ pid: number; lanes: number }>(
            `SELECT pid, count(*)::int AS lanes FROM pg_locks
              WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND classid = $1::bigint::oid
              GROUP BY pid`,
            [laneKey],
          )
        ).rows;
      const before = await laneHolders();
      expect(before.map((holder) => holder.lanes)).toEqual([32]);
      const terminated = await pool.query<{ ok: boolean }>('SELECT pg_terminate_backend($1) AS ok', [
        before[0]!.pid,
      ]);
      expect(terminated.rows.map((row) => row.ok)).toEqual([true]);
      await inTransaction(async (client) => {
        await s.outbox.publish(client, OrderPlaced, { orderId: 'after-restart' });
      });
      await waitFor('the event', () => s.placed.length === 1, WAIT);
      // PostgreSQL's view, not the relay's: a NEW backend holds all 32 lane locks.
      await waitFor(
        'a new session to hold every lane',
        async () => {
          const after = await laneHolders();
          return after.length === 1 && after[0]!.pid !== before[0]!.pid && after[0]!.lanes === 32;
        },
        WAIT,
      );
      expect(relay.stats().lanes).toHaveLength(32);
    });
  });

  describe('.stop', () => {
    it('finishes the batch in progress (published and removed) before it resolves', async () => {
      const s = await setUp();
      let release = (): void => {};
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let entered = false;
      const relay = await s.relay({
        publisher: {
          publish: async (messages) => {
            entered = true;
            await gate;
            await s.bus.publisher.publish(messages);
          },
        },
      });
      await inTransaction(async (client) => {
        for (const orderId of ['s-1', 's-2', 's-3']) await s.outbox.publish(client, OrderPlaced, { orderId });
      });
      await waitFor('the batch to start', () => entered, WAIT);
      let stopped = false;
      const stopping = relay.stop().then(() => {
        stopped = true;
      });
      // Nothing to wait for here but time: stop() must still be waiting for the held batch.
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(stopped).toBe(false);
      release();
      await stopping;
      expect(await outboxRows(s.schema)).toBe(0);
      expect(relay.stats().published).toBe(3);
      await waitFor('the events', () => s.placed.length === 3, WAIT);
    });
  });

  describe('with listen: false', () => {
    it('publishes by polling alone', async () => {
      const s = await setUp();
      // The relay's time is manual: it polls only when the test moves the clock.
      const clock = new ManualClock(Date.now());
      const relay = await s.relay({
        listen: false,
        pollIntervalMs: 1000,
        rebalanceIntervalMs: 60_000,
        clock,
      });
      await waitFor('the relay to sleep after its first pass', () => clock.nextTimerAt() !== undefined, WAIT);
      expect(relay.stats().lanes).toHaveLength(32);
      await inTransaction(async (client) => {
        await s.outbox.publish(client, OrderPlaced, { orderId: 'o-poll' });
      });
      // Nothing to wait for but time: a relay that LISTENed would be woken by the commit's NOTIFY
      // within milliseconds (see 'when a transaction commits').
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(relay.stats().published).toBe(0);
      expect(await outboxRows(s.schema)).toBe(1);
      clock.advance(1000);
      await waitFor('the event', () => s.placed.length === 1, WAIT);
      // The handler may run before the relay's COMMIT returns: its count follows.
      await waitFor('the relay to count it', () => relay.stats().published === 1, WAIT);
      expect(await outboxRows(s.schema)).toBe(0);
    });
  });

  describe('with a bad option', () => {
    it('throws invalid-option naming the fix', async () => {
      const s = await setUp();
      const error = await s.relay({ batchSize: 0 }).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      expect((error as Error).message).toMatch(/batchSize is 0: use a whole number from 1/);
    });
  });

  describe('with a schema name of 48 characters (the longest)', () => {
    it('records and publishes: the NOTIFY channel fits the 63-byte limit', async () => {
      const schema = `s${randomBytes(24).toString('hex')}`.slice(0, 48);
      await migratePostgres(pool, { schema });
      cleanups.push(() => dropSchema(pool, schema));
      const published: OutgoingMessage[] = [];
      const relay = await startOutboxRelay({
        connection: pool,
        schema,
        logger: silentLogger,
        publisher: { publish: async (messages) => void published.push(...messages) },
      });
      cleanups.push(() => relay.stop());
      const bus = createBus({ logger: silentLogger });
      const outbox = new PostgresOutbox(bus, { schema });
      await inTransaction(async (client) => {
        await outbox.publish(client, OrderPlaced, { orderId: 'long-schema' });
      });
      await waitFor('the relay to publish it', () => published.length === 1, WAIT);
    });
  });

  describe('with a schema name of 49 characters', () => {
    it('is refused with invalid-option naming the 48-character limit and why', () => {
      let error: unknown;
      try {
        postgresTables('a'.repeat(49));
      } catch (e) {
        error = e;
      }
      expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      expect((error as Error).message).toMatch(/at most 48.*NOTIFY channel.*63-byte/);
    });
  });

  describe('relayConnection', () => {
    it('turns TCP keepalive on for a URL or pool options, and leaves a shared pool as it is', () => {
      expect(relayConnection(databaseUrl)).toEqual({ connectionString: databaseUrl, keepAlive: true });
      expect(relayConnection({ connectionString: databaseUrl, max: 2 })).toEqual({
        connectionString: databaseUrl,
        max: 2,
        keepAlive: true,
      });
      expect(relayConnection({ connectionString: databaseUrl, keepAlive: false })).toMatchObject({
        keepAlive: false,
      });
      expect(relayConnection(pool)).toBe(pool);
    });
  });

  describe('when the schema is not migrated', () => {
    it('throws schema-outdated', async () => {
      const bus = createBus({ logger: silentLogger });
      const error = await startOutboxRelay({
        connection: pool,
        publisher: bus.publisher,
        schema: freshSchema(),
      }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'schema-outdated' });
    });
  });
});
