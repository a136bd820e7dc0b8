/**
 * Dead-letter identity on real Redis: one record per message per subscription, never shared by two
 * queues or two jobs, and the same record when a replayed message dies again for any reason.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type BusOptions,
  type MessageBus,
} from '../../src/index.js';
import { replayDeadLetters } from '../../src/extend.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';
import { waitFor } from '../helpers/local-redis.js';

const redisUrl = inject('redisUrl');

const Charge = defineCommand('identity.Charge', { schema: z.object({ orderId: z.string() }) });
const Refund = defineCommand('identity.Refund', { schema: z.object({ orderId: z.string() }) });

@CommandHandler(Charge, { retry: { attempts: 1 } })
class ChargeHandler {
  handle(): void {
    throw new Error('card declined');
  }
}

@CommandHandler(Refund)
class RefundHandler {
  handle(): void {}
}

const admin = new Redis(redisUrl);
const buses: MessageBus[] = [];
const prefixes: string[] = [];

afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 0 })));
  for (const prefix of prefixes.splice(0)) await deleteKeys(admin, prefix);
});

afterAll(async () => {
  await admin.quit();
});

function setup(options: Partial<BusOptions> = {}): {
  bus: MessageBus;
  store: RedisDeadLetterStore;
  prefix: string;
  broker: BullMqBroker;
} {
  const prefix = `{identity-${randomUUID().slice(0, 8)}}`;
  prefixes.push(prefix);
  const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
  const store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
  const bus = createBus({
    endpoint: 'billing',
    broker,
    deadLetters: store,
    handlers: [ChargeHandler, RefundHandler],
    logger: silentLogger,
    ...options,
  });
  buses.push(bus);
  return { bus, store, prefix, broker };
}

const countIs = (store: RedisDeadLetterStore, n: number) => async (): Promise<boolean> =>
  (await store.count()) === n;

describe('RedisDeadLetterStore with BullMqBroker', () => {
  describe('when undecodable jobs with the same job id arrive in two queues', () => {
    it('keeps one record for each', async () => {
      const { bus, store, prefix } = setup();
      await bus.start();
      const charge = new Queue(`cmd~${Charge.type}`, { connection: admin, prefix });
      const refund = new Queue(`cmd~${Refund.type}`, { connection: admin, prefix });

      // Job data in Harrier's shape, so the job id stands for the message id.
      const [a, b] = [
        await charge.add('x', { b: 'not a message' }),
        await refund.add('x', { b: 'also not one' }),
      ];
      expect([a.id, b.id]).toEqual(['1', '1']);

      await waitFor('two dead letters', countIs(store, 2), { timeoutMs: 10_000 });
      const { records } = await store.list();
      expect(new Set(records.map((r) => r.id)).size).toBe(2);
      expect(records.map((r) => r.envelope).sort()).toEqual(['also not one', 'not a message']);
      await charge.close();
      await refund.close();
    });
  });

  describe('when two jobs carry identical bad bodies', () => {
    it('keeps a record for each, so neither count is merged away', async () => {
      const { bus, store, prefix } = setup();
      await bus.start();
      const charge = new Queue(`cmd~${Charge.type}`, { connection: admin, prefix });

      await charge.add('x', 'not a message');
      await charge.add('x', 'not a message');

      await waitFor('two dead letters', countIs(store, 2), { timeoutMs: 10_000 });
      const { records } = await store.list();
      expect(records.map((r) => r.messageId).sort()).toEqual(['1', '2']);
      await charge.close();
    });
  });

  describe('when a replayed command fails again as signature-invalid', () => {
    it('updates its record instead of adding a second one', async () => {
      const oldKey = randomBytes(32).toString('hex');
      const newKey = randomBytes(32).toString('hex');
      const first = setup({ signing: { keys: [oldKey] } });
      await first.bus.start();
      await first.bus.send(Charge, { orderId: 'o-1' });
      await waitFor('the handler-failed dead letter', countIs(first.store, 1), { timeoutMs: 10_000 });
      const [failed] = (await first.store.list()).records;
      expect(failed).toMatchObject({ reason: 'handler-failed', handler: 'ChargeHandler' });
      await first.bus.stop();
      buses.splice(buses.indexOf(first.bus), 1);

      // The old key was dropped from the endpoint before the record was replayed.
      const rotated = createBus({
        endpoint: 'billing',
        broker: new BullMqBroker({ connection: redisUrl, prefix: first.prefix, logger: silentLogger }),
        deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix: first.prefix }),
        handlers: [ChargeHandler, RefundHandler],
        signing: { keys: [newKey] },
        logger: silentLogger,
      });
      buses.push(rotated);
      await rotated.start();
      const [result] = await replayDeadLetters({
        store: rotated.deadLetters,
        broker: rotated.broker,
        ids: [failed?.id ?? ''],
        by: 'test',
      });
      expect(result).toEqual({ id: failed?.id, ok: true });

      await waitFor(
        'the record to die again',
        async () => (await rotated.deadLetters.get(failed?.id ?? ''))?.status === 'dead',
        { timeoutMs: 10_000 },
      );
      expect(await rotated.deadLetters.count()).toBe(1);
      const again = await rotated.deadLetters.get(failed?.id ?? '');
      expect(again).toMatchObject({
        reason: 'signature-invalid',
        handler: 'ChargeHandler',
        messageId: failed?.messageId,
        replays: [{ by: 'test' }],
      });
    });
  });
});
