import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createPublishToken } from '../../src/broker/delivery-ledger.js';
import { RedisDeliveryLedger } from '../../src/redis/redis-delivery-ledger.js';
import { expectCode, failureOf } from '../../src/testing/expect-code.js';
import { freePort } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix, scanKeys, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);

describe('RedisDeliveryLedger', () => {
  const prefix = freshPrefix();
  let ledger: RedisDeliveryLedger | undefined;

  afterEach(async () => {
    await ledger?.close();
    await deleteKeys(redis.client, prefix);
  });

  describe('keys', () => {
    it('keeps one key per message id, expiring a minute after its latest record', async () => {
      ledger = new RedisDeliveryLedger({ connection: redis.client, prefix, scheduledRetentionMs: 3_600_000 });
      const messageId = randomUUID();
      const copy = { queue: 'evt~reporting~countOrders', messageId, token: createPublishToken() };

      await ledger.admit(copy, 10_000);
      await ledger.admit({ ...copy, queue: 'evt~reporting~sumRevenue' }, 10_000);

      expect(await scanKeys(redis.client, `${prefix}*`)).toEqual([`${prefix}:ledger:${messageId}`]);
      const afterAdmit = await redis.client.pttl(`${prefix}:ledger:${messageId}`);
      expect(afterAdmit).toBeGreaterThan(60_000);
      expect(afterAdmit).toBeLessThanOrEqual(70_000);

      // A settle with a shorter window never shortens what the key holds.
      await ledger.settle(copy, 'done', 0);
      expect(await redis.client.pttl(`${prefix}:ledger:${messageId}`)).toBeGreaterThan(60_000);

      await ledger.scheduled(messageId, createPublishToken(), ['cmd~billing.CloseDay'], Date.now() + 1000);
      expect(await redis.client.pttl(`${prefix}:ledger:${messageId}`)).toBeGreaterThan(3_600_000);
    });
  });

  describe('when Redis cannot be reached', () => {
    it('rejects with HarrierError redis-unavailable, so a receiver can pause instead of failing the message', async () => {
      const port = await freePort();
      ledger = new RedisDeliveryLedger({ connection: `redis://127.0.0.1:${port}`, prefix });
      const copy = { queue: 'cmd~orders.PlaceOrder', messageId: randomUUID(), token: createPublishToken() };

      expectCode(await failureOf(() => ledger!.admit(copy, 1000)), 'redis-unavailable');
    });
  });
});
