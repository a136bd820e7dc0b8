/**
 * Guarantee 8, every delivery settles, on real Redis: a delivery whose dead letter cannot be recorded
 * (forged delivery facts beside the envelope, a dead-letter store whose Redis is down) goes back to
 * its queue instead of holding a worker slot, the endpoint keeps serving good messages, and
 * `bus.stop()` resolves within its grace period plus the documented bound.
 */
import { randomUUID } from 'node:crypto';
import { Job, Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  UnrecoverableError,
  createBus,
  defineCommand,
  silentLogger,
  type MessageBus,
  type PayloadOf,
} from '../../src/index.js';
import { encodeEnvelope, prepareMessage } from '../../src/extend.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';
import { RedisServer, waitFor } from './fixtures/fault-harness.js';

const redisUrl = inject('redisUrl');

const Work = defineCommand('settle.Work', { schema: z.object({ n: z.number() }) });

/** Every call of the handler, by payload n; a negative n fails permanently. */
const calls: number[] = [];

@CommandHandler(Work, { retry: { attempts: 2, backoff: { baseMs: 20, jitter: 0 } } })
class WorkHandler {
  handle(payload: PayloadOf<typeof Work>): void {
    calls.push(payload.n);
    if (payload.n < 0) throw new UnrecoverableError(`work ${payload.n} is refused`);
  }
}

const GRACE_MS = 1_000;
/** What docs/guarantees/graceful-stop.md promises beyond the grace period (2 x settle timeout + 5 s). */
const STOP_BOUND_MS = GRACE_MS + 2 * 1_000 + 5_000;

const buses: MessageBus[] = [];
const prefixes: string[] = [];
const admin = new Redis(redisUrl);

afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 0 })));
  for (const prefix of prefixes.splice(0)) await deleteKeys(admin, prefix);
  calls.length = 0;
});

afterAll(async () => {
  await admin.quit();
});

function bus(prefix: string, concurrency: number, deadLetters: RedisDeadLetterStore): MessageBus {
  const created = createBus({
    endpoint: 'settle',
    broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
    deadLetters,
    handlers: [WorkHandler],
    concurrency,
    settleTimeoutMs: 1_000,
    gracePeriodMs: GRACE_MS,
    logger: silentLogger,
  });
  buses.push(created);
  return created;
}

function freshPrefix(): string {
  const prefix = `{settle-${randomUUID().slice(0, 8)}}`;
  prefixes.push(prefix);
  return prefix;
}

async function stopTimed(stopping: MessageBus): Promise<number> {
  const started = Date.now();
  await stopping.stop();
  buses.splice(buses.indexOf(stopping), 1);
  return Date.now() - started;
}

async function sendGood(target: MessageBus, count: number): Promise<void> {
  for (let n = 1; n <= count; n++) await target.send(Work, { n });
}

const goodHandled = (count: number) => (): boolean =>
  Array.from({ length: count }, (_, i) => i + 1).every((n) => calls.includes(n));

describe('Dispatcher on BullMqBroker', () => {
  describe.each([1, 4])('at concurrency %i', (concurrency) => {
    describe('when a job carries forged or damaged delivery facts', () => {
      it('dead-letters it, keeps handling good messages, and stops within its bound', async () => {
        const prefix = freshPrefix();
        const store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
        const running = bus(prefix, concurrency, store);
        const queue = new Queue(`cmd~${Work.type}`, { connection: admin, prefix });
        await running.start();
        const refused = prepareMessage(Work, { n: -1 }, {}, { now: Date.now() }).envelope;

        // Data another producer (or a bit flip) could leave in a job: Harrier never wrote these.
        await queue.add(Work.type, { b: 'not json', h: [null] });
        await queue.add(
          Work.type,
          {
            b: encodeEnvelope(refused),
            a: 'one',
            h: [{ attempt: 1, at: 1, error: { name: 'E', message: 'm', stack: 5 } }, 'x'],
            d: { reason: 7 },
          },
          { jobId: refused.id },
        );
        await sendGood(running, 20);

        await waitFor('both bad jobs to be dead-lettered', async () => (await store.count()) === 2, {
          timeoutMs: 15_000,
        });
        await waitFor('the good messages to be handled', goodHandled(20), { timeoutMs: 15_000 });
        const { records } = await store.list();
        expect(records.map((r) => r.reason).sort()).toEqual(['handler-failed', 'malformed']);
        const failed = records.find((r) => r.reason === 'handler-failed');
        // The forged history entry with a numeric stack is kept without it; the string entry is dropped.
        expect(failed?.attempts.map((a) => a.error)).toEqual([
          { name: 'E', message: 'm' },
          expect.objectContaining({ name: 'UnrecoverableError', message: 'work -1 is refused' }),
        ]);
        const counts = await queue.getJobCounts('active', 'wait', 'delayed');
        expect(counts).toEqual({ active: 0, wait: 0, delayed: 0 });
        expect(await stopTimed(running)).toBeLessThan(STOP_BOUND_MS);
        await queue.close();
      });
    });

    describe('when the dead-letter store is unreachable for longer than its tries', () => {
      let storeRedis: RedisServer;

      beforeAll(async () => {
        storeRedis = await RedisServer.start({ appendOnly: false });
      });

      afterAll(async () => {
        await storeRedis.destroy();
      });

      it('sends the message back with backoff without running the handler again, serves the rest, and records the dead letter once the store is back', async () => {
        const prefix = freshPrefix();
        const store = (): RedisDeadLetterStore =>
          new RedisDeadLetterStore({ connection: storeRedis.url, prefix, connectTimeoutMs: 500 });
        const first = bus(prefix, concurrency, store());
        const queue = new Queue(`cmd~${Work.type}`, { connection: admin, prefix });
        await first.start();
        await storeRedis.kill();

        const bad = [await first.send(Work, { n: -1 }), await first.send(Work, { n: -2 })];
        await sendGood(first, 20);

        await waitFor('the good messages to be handled while the store is down', goodHandled(20), {
          timeoutMs: 20_000,
        });
        // Each bad message went back to its queue at least twice (its failed count keeps rising),
        // so no worker slot holds it; its handler ran once all the same.
        await waitFor(
          'each bad message to be sent back to its queue twice',
          async () => {
            const jobs = await Promise.all(bad.map((id) => Job.fromId(queue, id)));
            return jobs.every((job) => ((job?.data as { a?: number } | undefined)?.a ?? 0) >= 2);
          },
          { timeoutMs: 20_000 },
        );
        expect(calls.filter((n) => n < 0).sort((a, b) => a - b)).toEqual([-2, -1]);
        expect(await stopTimed(first)).toBeLessThan(STOP_BOUND_MS);

        // Nothing was lost: once the store is back, the next process records both dead letters.
        await storeRedis.restart();
        const deadLetters = store();
        const second = bus(prefix, concurrency, deadLetters);
        await second.start();
        // Each waits out its send-back backoff (doubling from 1 s) in the delayed set: let it come due
        // now, as it would later on its own.
        await queue.promoteJobs();
        await waitFor('both dead letters to be recorded', async () => (await deadLetters.count()) === 2, {
          timeoutMs: 90_000,
        });
        const { records } = await deadLetters.list();
        expect(records.map((r) => r.messageId).sort()).toEqual([...bad].sort());
        for (const record of records) {
          expect(record.reason).toBe('handler-failed');
          expect(record.handler).toBe('WorkHandler');
          expect(record.attemptCount).toBe(1);
          expect(record.error.name).toBe('UnrecoverableError');
        }
        expect(calls.filter((n) => n < 0).sort((a, b) => a - b)).toEqual([-2, -1]);
        await waitFor(
          'the queue to be empty',
          async () => {
            const counts = await queue.getJobCounts('active', 'wait', 'delayed');
            return Object.values(counts).every((n) => n === 0);
          },
          { timeoutMs: 10_000 },
        );
        await queue.close();
      }, 150_000);
    });
  });
});
