import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  UnrecoverableError,
  type MessageBus,
} from '../../src/index.js';
import { BullMqBroker, type BullMqBrokerOptions } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const Charge = defineCommand('retention.Charge', { schema: z.object({ n: z.number() }) });

@CommandHandler(Charge)
class AlwaysFails {
  handle(): never {
    throw new UnrecoverableError('gateway refused the card');
  }
}

describe('BullMqBroker', () => {
  let prefix: string;
  let admin: Redis;
  let queue: Queue;
  let bus: MessageBus | undefined;

  beforeEach(() => {
    prefix = `{retention-${randomUUID().slice(0, 8)}}`;
    admin = new Redis(redisUrl);
    queue = new Queue(`cmd~${Charge.type}`, { connection: admin, prefix });
  });

  afterEach(async () => {
    await bus?.stop({ gracePeriodMs: 200 });
    bus = undefined;
    await queue.close();
    await deleteKeys(admin, prefix);
    await admin.quit();
  });

  /** A bus whose only handler dead-letters every message at once, on a broker with `options`. */
  async function startBus(options: Partial<BullMqBrokerOptions>): Promise<MessageBus> {
    bus = createBus({
      endpoint: 'billing',
      broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger, ...options }),
      handlers: [AlwaysFails],
      concurrency: 1,
      logger: silentLogger,
    });
    await bus.start();
    return bus;
  }

  /** Sends one message and waits until it is dead-lettered: one failure at a time, in send order. */
  async function deadLetterOne(running: MessageBus, n: number): Promise<string> {
    const before = await running.deadLetters.count();
    const id = await running.send(Charge, { n });
    await waitFor(
      `message ${n} to be dead-lettered`,
      async () => (await running.deadLetters.count()) > before,
      {
        timeoutMs: 10_000,
      },
    );
    await waitFor(`job ${n} to leave the active list`, async () => (await queue.getActiveCount()) === 0, {
      timeoutMs: 10_000,
    });
    return id;
  }

  /** Job hashes of the queue (one per job still stored), not counting BullMQ's own keys. */
  async function jobHashes(): Promise<string[]> {
    const ids: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}:cmd~${Charge.type}:*`, 'COUNT', 500);
      cursor = next;
      for (const key of keys) {
        const id = key.slice(`${prefix}:cmd~${Charge.type}:`.length);
        if (/^[0-9a-f-]{36}$/.test(id) && (await admin.type(key)) === 'hash') ids.push(id);
      }
    } while (cursor !== '0');
    return ids.sort();
  }

  describe('failedRetentionCount', () => {
    describe('when more messages are dead-lettered than the cap', () => {
      it('keeps only the newest failed jobs in the failed set, and deletes the others', async () => {
        const running = await startBus({ failedRetentionCount: 3 });
        const ids: string[] = [];
        for (let n = 0; n < 6; n++) ids.push(await deadLetterOne(running, n));

        expect(await running.deadLetters.count()).toBe(6);
        expect(await queue.getFailedCount()).toBe(3);
        const kept = (await queue.getFailed()).map((job) => job.id).sort();
        expect(kept).toEqual(ids.slice(3).sort());
        expect(await jobHashes()).toEqual(kept);
      });
    });

    describe('when it is 0', () => {
      it('keeps no failed job, and the dead letters are still stored', async () => {
        const running = await startBus({ failedRetentionCount: 0 });
        for (let n = 0; n < 2; n++) await deadLetterOne(running, n);

        expect(await running.deadLetters.count()).toBe(2);
        expect(await queue.getFailedCount()).toBe(0);
        expect(await jobHashes()).toEqual([]);
      });
    });

    describe('when it is not given', () => {
      it('caps each queue at 10,000 failed jobs', async () => {
        const running = await startBus({});
        await deadLetterOne(running, 0);
        const [job] = await queue.getFailed();
        expect(job?.opts.removeOnFail).toEqual({ age: 604_800, count: 10_000 });
      });
    });
  });

  describe('failedRetentionMs', () => {
    describe('when a failed job is older than the retention and another job fails', () => {
      it('removes the old one and keeps the recent ones', async () => {
        const running = await startBus({ failedRetentionMs: 60_000 });
        const old = await deadLetterOne(running, 0);
        const recent = await deadLetterOne(running, 1);
        // BullMQ ages failed jobs by their score in the failed set (the time they failed) when another
        // job fails; moving the first one's score two minutes back stands in for two minutes passing.
        const failedKey = `${prefix}:cmd~${Charge.type}:failed`;
        expect(await admin.zadd(failedKey, 'XX', 'CH', Date.now() - 120_000, old)).toBe(1);
        expect(await queue.getFailedCount()).toBe(2);

        const latest = await deadLetterOne(running, 2);

        expect((await queue.getFailed()).map((job) => job.id).sort()).toEqual([recent, latest].sort());
        expect(await jobHashes()).toEqual([recent, latest].sort());
        expect(await running.deadLetters.count()).toBe(3);
      });
    });
  });
});
