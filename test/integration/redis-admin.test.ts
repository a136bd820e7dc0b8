import { randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { HarrierError, silentLogger } from '../../src/index.js';
import type { TopicSpec } from '../../src/log/event-log.js';
import {
  BullMqBroker,
  RedisCheckpointStore,
  RedisEventLog,
  RedisSagaStore,
  openRedisAdmin,
  type RedisAdmin,
  type RedisConnectionOptions,
} from '../../src/redis/index.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const TOPICS: TopicSpec[] = [
  { name: 'orders', partitions: 4 },
  { name: 'payments', partitions: 2 },
];

/** Closes what a test opened, and deletes its keys. */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function freshPrefix(): string {
  const prefix = `{hrt-admin-${randomUUID().slice(0, 8)}}`;
  cleanups.push(async () => {
    const client = new Redis(redisUrl);
    await deleteKeys(client, prefix);
    await client.quit();
  });
  return prefix;
}

async function admin(connection: RedisConnectionOptions, prefix: string): Promise<RedisAdmin> {
  const opened = await openRedisAdmin(connection, { prefix });
  cleanups.push(() => opened.close());
  return opened;
}

/** A system as its processes leave it: two endpoints registered, jobs waiting, a log and checkpoints. */
async function seedSystem(connection: RedisConnectionOptions, prefix: string): Promise<void> {
  const broker = new BullMqBroker({ connection, prefix, partitions: 4, logger: silentLogger });
  try {
    await broker.register('billing', [
      { kind: 'command', handler: 'ChargeHandler', types: ['billing.Charge'] },
    ]);
    await broker.register('shipping', [
      {
        kind: 'event',
        handler: 'ShipOnPaid',
        types: ['billing.Paid'],
        orderedTypes: ['billing.Paid'],
      },
    ]);
    await broker.publish({ id: randomUUID(), kind: 'command', type: 'billing.Charge', body: '{}' });
    await broker.publish({ id: randomUUID(), kind: 'command', type: 'billing.Charge', body: '{}' });
    await broker.publish({
      id: randomUUID(),
      kind: 'event',
      type: 'billing.Paid',
      body: '{}',
      partitionKey: 'order-1',
      ordered: true,
    });
  } finally {
    await broker.close();
  }
  const log = new RedisEventLog({ connection, prefix, topics: TOPICS });
  const checkpoints = new RedisCheckpointStore({ connection, prefix });
  try {
    // Three records in orders partition of 'k1', one in payments.
    const acks = [];
    for (let i = 0; i < 3; i++) {
      acks.push(await log.append('orders', { id: randomUUID(), key: 'k1', type: 'e', body: '{}' }));
    }
    const payment = await log.append('payments', { id: randomUUID(), key: 'p', type: 'e', body: '{}' });
    const orders = acks[0]?.partition ?? 0;
    await checkpoints.commit('OrderList', 'orders', orders, 0, 1_700_000_000_000);
    await checkpoints.commit('Revenue', 'payments', payment.partition, 0, 1_700_000_000_000);
  } finally {
    await log.close();
    await checkpoints.close();
  }
}

describe('RedisAdmin', () => {
  describe('.partitionCount', () => {
    it('is undefined before any broker started under the prefix, then the count the brokers agreed on', async () => {
      const prefix = freshPrefix();
      const empty = await admin(redisUrl, prefix);
      expect(await empty.partitionCount()).toBeUndefined();
      await seedSystem(redisUrl, prefix);
      expect(await empty.partitionCount()).toBe(4);
    });
  });

  describe('.topology', () => {
    it('lists each endpoint, its subscriptions and their queues as the broker names them, with job counts', async () => {
      const prefix = freshPrefix();
      await seedSystem(redisUrl, prefix);
      const { endpoints, unreadable } = await (await admin(redisUrl, prefix)).topology();
      expect(unreadable).toEqual([]);
      expect(endpoints.map((e) => e.endpoint)).toEqual(['billing', 'shipping']);
      const [billing, shipping] = endpoints;
      expect(billing?.registeredAt).toEqual(expect.any(Number));
      expect(billing?.subscriptions).toEqual([
        {
          subscription: { kind: 'command', handler: 'ChargeHandler', types: ['billing.Charge'] },
          queues: [{ queue: 'cmd~billing.Charge', waiting: 2, active: 0, delayed: 0 }],
          total: { queue: 'cmd~billing.Charge', waiting: 2, active: 0, delayed: 0 },
        },
      ]);
      const ordered = shipping?.subscriptions[0];
      expect(ordered?.queues.map((q) => q.queue)).toEqual([
        'evt~shipping~ShipOnPaid',
        'evt~shipping~ShipOnPaid~p0',
        'evt~shipping~ShipOnPaid~p1',
        'evt~shipping~ShipOnPaid~p2',
        'evt~shipping~ShipOnPaid~p3',
      ]);
      // The ordered event waits in the partition queue of its key.
      expect(ordered?.total).toEqual({ queue: 'evt~shipping~ShipOnPaid', waiting: 1, active: 0, delayed: 0 });
      expect(ordered?.queues[0]?.waiting).toBe(0);
    });

    it('lists the partition queues of an endpoint’s ordered command types once, after its subscriptions', async () => {
      const prefix = freshPrefix();
      const broker = new BullMqBroker({ connection: redisUrl, prefix, partitions: 2, logger: silentLogger });
      try {
        await broker.register('shop', [
          { kind: 'command', handler: 'PlaceHandler', types: ['shop.Place'], orderedTypes: ['shop.Place'] },
          {
            kind: 'command',
            handler: 'CancelHandler',
            types: ['shop.Cancel'],
            orderedTypes: ['shop.Cancel'],
          },
          { kind: 'command', handler: 'NoteHandler', types: ['shop.Note'] },
        ]);
        for (const type of ['shop.Place', 'shop.Cancel'])
          await broker.publish({
            id: randomUUID(),
            kind: 'command',
            type,
            body: '{}',
            partitionKey: 'order-1',
            ordered: true,
          });
      } finally {
        await broker.close();
      }

      const [shop] = (await (await admin(redisUrl, prefix)).topology()).endpoints;
      expect(
        shop?.subscriptions.map(({ subscription, queues, total }) => [
          subscription.handler,
          subscription.types,
          queues.map((q) => q.queue),
          [total.queue, total.waiting],
        ]),
      ).toEqual([
        ['PlaceHandler', ['shop.Place'], ['cmd~shop.Place'], ['cmd~shop.Place', 0]],
        ['CancelHandler', ['shop.Cancel'], ['cmd~shop.Cancel'], ['cmd~shop.Cancel', 0]],
        ['NoteHandler', ['shop.Note'], ['cmd~shop.Note'], ['cmd~shop.Note', 0]],
        [
          '(ordered commands)',
          ['shop.Place', 'shop.Cancel'],
          ['cmd~shop~ordered~p0', 'cmd~shop~ordered~p1'],
          ['cmd~shop~ordered', 2],
        ],
      ]);
    });

    it('reports a registration that is not JSON as unreadable and lists the others', async () => {
      const prefix = freshPrefix();
      await seedSystem(redisUrl, prefix);
      const client = new Redis(redisUrl);
      cleanups.push(() => client.quit());
      await client.hset(`${prefix}:harrier:endpoints`, 'broken', 'not json');
      const { endpoints, unreadable } = await (await admin(client, prefix)).topology();
      expect(unreadable).toEqual(['broken']);
      expect(endpoints.map((e) => e.endpoint)).toEqual(['billing', 'shipping']);
    });

    it('is empty under a prefix nothing registered under', async () => {
      expect(await (await admin(redisUrl, freshPrefix())).topology()).toEqual({
        endpoints: [],
        unreadable: [],
      });
    });
  });

  describe('.logPartitions', () => {
    it('finds every (topic, partition) the log appended to', async () => {
      const prefix = freshPrefix();
      await seedSystem(redisUrl, prefix);
      const found = await (await admin(redisUrl, prefix)).logPartitions();
      expect([...found.keys()].sort()).toEqual(['orders', 'payments']);
      expect(found.get('orders')).toHaveLength(1);
      expect(found.get('payments')).toHaveLength(1);
    });
  });

  describe('.projectionLags', () => {
    it('gives each projection its checkpoint, the log end and the lag per partition', async () => {
      const prefix = freshPrefix();
      await seedSystem(redisUrl, prefix);
      const opened = await admin(redisUrl, prefix);
      const lags = await opened.projectionLags();
      expect(lags.map((l) => [l.projection, l.topic, l.checkpoint, l.endOffset, l.lag])).toEqual([
        ['OrderList', 'orders', 0, 3, 2],
        ['Revenue', 'payments', 0, 1, 0],
      ]);
      expect(lags[0]?.updatedAt).toBe(1_700_000_000_000);
      expect((await opened.projectionLags('Revenue')).map((l) => l.projection)).toEqual(['Revenue']);
      expect(await opened.projectionLags('Nope')).toEqual([]);
    });
  });

  describe('.sagaStore', () => {
    it('reads the instances an application saved under the prefix', async () => {
      const prefix = freshPrefix();
      const app = new RedisSagaStore({ connection: redisUrl, prefix });
      cleanups.push(() => app.close());
      await app.save(
        { saga: 'fulfilment', id: 'o-1', state: { paid: true }, status: 'active', timeouts: [], now: 1 },
        0,
      );
      const store = (await admin(redisUrl, prefix)).sagaStore();
      expect(await store.get('fulfilment', 'o-1')).toMatchObject({ state: { paid: true }, version: 1 });
    });
  });

  describe('.close', () => {
    it('leaves a client passed in open, and refuses queries afterwards', async () => {
      const client = new Redis(redisUrl);
      cleanups.push(() => client.quit());
      const opened = await openRedisAdmin(client, { prefix: freshPrefix() });
      opened.checkpointStore();
      await opened.close();
      expect(await client.ping()).toBe('PONG');
      await expect(opened.topology()).rejects.toMatchObject({ code: 'admin-closed' });
    });
  });

  describe('openRedisAdmin', () => {
    it('fails with redis-unavailable naming where Redis was looked for, password masked', async () => {
      const error: unknown = await openRedisAdmin('redis://:s3cret@127.0.0.1:1').catch((e: unknown) => e);
      expect(HarrierError.is(error) && error.code).toBe('redis-unavailable');
      expect((error as Error).message).toContain('redis://:***@127.0.0.1:1');
      expect((error as Error).message).not.toContain('s3cret');
    });
  });

  describe('on a Redis Cluster', () => {
    let cluster: RedisCluster | undefined;
    beforeAll(async () => {
      cluster = await RedisCluster.start();
    }, 60_000);
    afterAll(async () => {
      await cluster?.destroy();
    });

    it('answers topology, partition count and projection lags from seed nodes', async () => {
      const connection = { cluster: cluster?.nodes ?? [] };
      const prefix = `{hrt-admin-${randomUUID().slice(0, 8)}}`;
      await seedSystem(connection, prefix);
      const opened = await admin(connection, prefix);
      expect(await opened.partitionCount()).toBe(4);
      const { endpoints } = await opened.topology();
      expect(endpoints.map((e) => [e.endpoint, e.subscriptions[0]?.total.waiting])).toEqual([
        ['billing', 2],
        ['shipping', 1],
      ]);
      expect([...(await opened.logPartitions()).keys()].sort()).toEqual(['orders', 'payments']);
      expect((await opened.projectionLags()).map((l) => l.lag)).toEqual([2, 0]);
      const shared = new Cluster(cluster?.nodes ?? []);
      cleanups.push(() => {
        shared.disconnect();
        return Promise.resolve();
      });
      expect(await (await admin(shared, prefix)).partitionCount()).toBe(4);
    });
  });
});

function sharedClient(): Redis {
  const client = new Redis(redisUrl);
  cleanups.push(() => client.quit());
  return client;
}

describe('RedisConnectionOptions', () => {
  describe('BullMqBroker given an ioredis client', () => {
    it('works on duplicates of it and leaves it open on close', async () => {
      const client = sharedClient();
      const prefix = freshPrefix();
      const broker = new BullMqBroker({ connection: client, prefix, logger: silentLogger });
      await broker.register('billing', [{ kind: 'command', handler: 'Charge', types: ['billing.Charge'] }]);
      await broker.publish({ id: randomUUID(), kind: 'command', type: 'billing.Charge', body: '{}' });
      await broker.close();
      expect(await client.ping()).toBe('PONG');
      const admin = await openRedisAdmin(client, { prefix });
      cleanups.push(() => admin.close());
      const { endpoints } = await admin.topology();
      expect(endpoints[0]?.subscriptions[0]?.total.waiting).toBe(1);
    });
  });

  describe('RedisCheckpointStore given ioredis options', () => {
    it('creates a client of its own from them', async () => {
      const { hostname, port } = new URL(redisUrl);
      const store = new RedisCheckpointStore({
        connection: { host: hostname, port: Number(port || 6379) },
        prefix: freshPrefix(),
      });
      cleanups.push(() => store.close());
      expect(await store.commit('P', 'orders', 0, 3, 1)).toBe(3);
      expect(await store.get('P', 'orders', 0)).toBe(3);
    });
  });

  describe('BullMqBroker given an unreachable URL with a password', () => {
    it('names it with the password masked', async () => {
      const broker = new BullMqBroker({
        connection: 'redis://:s3cret@127.0.0.1:1',
        prefix: freshPrefix(),
        logger: silentLogger,
        publishTimeoutMs: 500,
      });
      cleanups.push(() => broker.close());
      const error = await broker
        .publish({ id: randomUUID(), kind: 'command', type: 'x.Y', body: '{}', requireRoute: false })
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'redis-unavailable' });
      expect((error as Error).message).toContain('redis://:***@127.0.0.1:1');
      expect((error as Error).message).not.toContain('s3cret');
    });
  });
});
