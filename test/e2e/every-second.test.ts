/**
 * Three processes run the same every-second schedule on one Redis for 30 s, in real time: 30 ± 1
 * ticks of that window are handled, none twice.
 */
import { afterEach, describe, expect, inject, it } from 'vitest';
import { waitFor } from '../helpers/local-redis.js';
import { freshPrefix } from '../helpers/redis.js';
import {
  cleanUp,
  startHeartbeatConsumer,
  startWorker,
  stop,
  type HeartbeatConsumer,
} from './fixtures/every-processes.js';

const redisUrl = inject('redisUrl');
const EVERY_MS = 1_000;
const WINDOW_MS = 30_000;

describe('MessageBus.every, every second, in 3 processes on Redis', () => {
  const prefix = freshPrefix();
  let consumer: HeartbeatConsumer | undefined;

  afterEach(async () => {
    await cleanUp(redisUrl, prefix, consumer);
  });

  it('sends 30 ± 1 messages in 30 s, none twice', async () => {
    consumer = await startHeartbeatConsumer(redisUrl, prefix);
    const { ticks } = consumer;
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
