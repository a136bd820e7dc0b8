import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { silentLogger } from '../../src/index.js';
import { BullMqBroker, RedisCheckpointStore, openRedisAdmin } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function freshPrefix(): string {
  const prefix = `{hrt-conn-${randomUUID().slice(0, 8)}}`;
  cleanups.push(async () => {
    const client = new Redis(redisUrl);
    await deleteKeys(client, prefix);
    await client.quit();
  });
  return prefix;
}

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
      expect(endpoints[0]?.subscriptions[0]?.total.wait).toBe(1);
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
