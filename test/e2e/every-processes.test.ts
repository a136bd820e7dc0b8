/**
 * Three processes run the same recurring schedule on one Redis (`everyMs: 200`, standing for an
 * every-second schedule), one of them killed with SIGKILL on the way: each tick is handled once,
 * and none is missing while any process runs.
 */
import 'reflect-metadata';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  CommandHandler,
  SCHEDULE_TICK_HEADER,
  createBus,
  silentLogger,
  type MessageBus,
  type MessageContext,
} from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';
import { Heartbeat } from './fixtures/every-messages.js';
import { children, startWorker, stop } from './fixtures/every-processes.js';

const redisUrl = inject('redisUrl');
const EVERY_MS = 200;

describe('MessageBus.every in 3 processes on Redis', () => {
  const prefix = freshPrefix();
  let consumer: MessageBus | undefined;

  afterEach(async () => {
    await Promise.all([...children].map((child) => stop(child, 'SIGKILL')));
    await consumer?.stop({ gracePeriodMs: 200 });
    const admin = new Redis(redisUrl);
    await deleteKeys(admin, prefix);
    await admin.quit();
  });

  it('handles each tick once, with none missing, when one process is killed on the way', async () => {
    const ticks: string[] = [];
    @CommandHandler(Heartbeat)
    class HeartbeatHandler {
      handle(_payload: unknown, context: MessageContext): void {
        ticks.push(context.headers[SCHEDULE_TICK_HEADER] ?? 'none');
      }
    }
    consumer = createBus({
      endpoint: 'heartbeats',
      broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
      handlers: [HeartbeatHandler],
      logger: silentLogger,
    });
    await consumer.start();
    const workers = await Promise.all([0, 1, 2].map(() => startWorker(redisUrl, prefix, EVERY_MS)));
    const from = Date.now();
    await waitFor('10 ticks', () => ticks.length >= 10, { timeoutMs: 10_000 });
    const [first] = workers;
    if (first === undefined) throw new Error('No worker started');
    await stop(first, 'SIGKILL');
    const countAtKill = ticks.length;
    await waitFor('10 more ticks after the kill', () => ticks.length >= countAtKill + 10, {
      timeoutMs: 10_000,
    });
    await Promise.all(workers.slice(1).map((child) => stop(child, 'SIGTERM')));
    const to = Date.now();
    // What the last tick sent is handled within a few ticks' time.
    await new Promise((resolve) => setTimeout(resolve, 5 * EVERY_MS));

    expect(new Set(ticks).size).toBe(ticks.length);
    const times = ticks.map((t) => Date.parse(t)).sort((a, b) => a - b);
    for (let i = 1; i < times.length; i++) expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBe(EVERY_MS);
    // All three were running before `from` and two until `to`: every tick of the window, within 1.
    const expected = Math.floor(to / EVERY_MS) - Math.floor(from / EVERY_MS);
    expect(ticks.length).toBeGreaterThanOrEqual(expected - 1);
  }, 60_000);
});
