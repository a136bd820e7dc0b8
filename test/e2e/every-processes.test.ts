/**
 * Three processes run the same recurring schedule on one Redis (`everyMs: 200`, standing for an
 * every-second schedule), one of them killed with SIGKILL on the way: each tick is handled once,
 * and none is missing while any process runs.
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
const EVERY_MS = 200;

describe('MessageBus.every in 3 processes on Redis', () => {
  const prefix = freshPrefix();
  let consumer: HeartbeatConsumer | undefined;

  afterEach(async () => {
    await cleanUp(redisUrl, prefix, consumer);
  });

  it('handles each tick once, with none missing, when one process is killed on the way', async () => {
    consumer = await startHeartbeatConsumer(redisUrl, prefix);
    const { ticks } = consumer;
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
