/**
 * Three processes run the same every-second schedule on one Redis for 30 s, in real time: 30 ± 1
 * ticks of that window are handled, none twice.
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
const EVERY_MS = 1_000;
const WINDOW_MS = 30_000;

describe('MessageBus.every, every second, in 3 processes on Redis', () => {
  const prefix = freshPrefix();
  let consumer: MessageBus | undefined;

  afterEach(async () => {
    await Promise.all([...children].map((child) => stop(child, 'SIGKILL')));
    await consumer?.stop({ gracePeriodMs: 200 });
    const admin = new Redis(redisUrl);
    await deleteKeys(admin, prefix);
    await admin.quit();
  });

  it('sends 30 ± 1 messages in 30 s, none twice', async () => {
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
    const to = from + WINDOW_MS;
    // Every tick of the window handled: the last one is due at or before `to`.
    const lastTick = Math.floor(to / EVERY_MS) * EVERY_MS;
    await waitFor('the window’s last tick', () => ticks.some((tick) => Date.parse(tick) >= lastTick), {
      timeoutMs: WINDOW_MS + 10_000,
    });
    await Promise.all(workers.map((child) => stop(child, 'SIGTERM')));
    // A duplicate sent late by another process would arrive within a tick.
    await new Promise((resolve) => setTimeout(resolve, EVERY_MS));

    expect(new Set(ticks).size).toBe(ticks.length);
    const inWindow = ticks.map((tick) => Date.parse(tick)).filter((at) => at > from && at <= to);
    expect(inWindow.length).toBeGreaterThanOrEqual(29);
    expect(inWindow.length).toBeLessThanOrEqual(31);
  }, 60_000);
});
