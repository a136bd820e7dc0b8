import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { silentLogger, uuidv7 } from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const TYPE = 'cancel.SendReminder';
const QUEUE = `cmd~${TYPE}`;

describe('BullMqBroker', () => {
  let prefix: string;
  let admin: Redis;
  let broker: BullMqBroker;

  beforeEach(async () => {
    prefix = freshPrefix();
    admin = new Redis(redisUrl);
    broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
    await broker.register('reminders', [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
  });

  afterEach(async () => {
    await broker.close();
    await deleteKeys(admin, prefix);
    await admin.quit();
  });

  describe('.publish', () => {
    describe('when the message is delayed', () => {
      it('records its queue for cancel until its time, plus a minute', async () => {
        const id = uuidv7();
        await broker.publish({ id, kind: 'command', type: TYPE, body: 'b', deliverAt: Date.now() + 10_000 });

        const key = `${prefix}:harrier:scheduled:${id}`;
        expect(await admin.smembers(key)).toEqual([QUEUE]);
        const ttl = await admin.pttl(key);
        expect(ttl).toBeGreaterThan(65_000);
        expect(ttl).toBeLessThanOrEqual(70_000);
      });
    });

    describe('when the message is not delayed', () => {
      it('records nothing for cancel', async () => {
        const id = uuidv7();
        await broker.publish({ id, kind: 'command', type: TYPE, body: 'b' });

        expect(await admin.exists(`${prefix}:harrier:scheduled:${id}`)).toBe(0);
      });
    });
  });

  describe('.cancel', () => {
    it('removes the delayed job, its deduplication key and its record', async () => {
      const id = uuidv7();
      await broker.publish({ id, kind: 'command', type: TYPE, body: 'b', deliverAt: Date.now() + 10_000 });
      expect(await admin.exists(`${prefix}:${QUEUE}:${id}`)).toBe(1);
      expect(await admin.exists(`${prefix}:${QUEUE}:de:${id}`)).toBe(1);

      expect(await broker.cancel(id)).toBe(1);

      expect(await admin.exists(`${prefix}:${QUEUE}:${id}`)).toBe(0);
      expect(await admin.exists(`${prefix}:${QUEUE}:de:${id}`)).toBe(0);
      expect(await admin.zcard(`${prefix}:${QUEUE}:delayed`)).toBe(0);
      expect(await admin.smembers(`${prefix}:harrier:scheduled:${id}`)).toEqual([]);
    });

    it('leaves a job that is waiting (not delayed) as it is', async () => {
      const id = uuidv7();
      await broker.publish({ id, kind: 'command', type: TYPE, body: 'b', deliverAt: Date.now() + 10_000 });
      // As a worker promotes a job whose time came: out of the delayed set into the wait list.
      await admin.zrem(`${prefix}:${QUEUE}:delayed`, id);
      await admin.lpush(`${prefix}:${QUEUE}:wait`, id);

      expect(await broker.cancel(id)).toBe(0);

      expect(await admin.exists(`${prefix}:${QUEUE}:${id}`)).toBe(1);
    });
  });
});
