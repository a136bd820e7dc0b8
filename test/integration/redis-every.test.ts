import 'reflect-metadata';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  SCHEDULE_TICK_HEADER,
  createBus,
  defineCommand,
  silentLogger,
  type MessageBus,
  type MessageContext,
} from '../../src/index.js';
import { BullMqBroker, RedisScheduleStore } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const Heartbeat = defineCommand('every.Heartbeat', { schema: z.object({ source: z.string() }) });
const EVERY_MS = 200;
const RUN_MS = 6_000;

describe('MessageBus.every on Redis', () => {
  let prefix: string;
  let admin: Redis;
  let buses: MessageBus[] = [];

  beforeEach(() => {
    prefix = freshPrefix();
    admin = new Redis(redisUrl);
  });

  afterEach(async () => {
    await Promise.all(buses.map((bus) => bus.stop({ gracePeriodMs: 200 })));
    buses = [];
    await deleteKeys(admin, prefix);
    await admin.quit();
  });

  it('sends each tick once while 3 processes run the same schedule', async () => {
    // Three buses of one endpoint, each with its own broker and store connections, as 3 processes
    // would have: everyMs 200 for 6 s (30 ticks) stands for an every-second schedule for 30 s.
    const ticks: string[] = [];
    @CommandHandler(Heartbeat)
    class HeartbeatHandler {
      handle(_payload: unknown, context: MessageContext): void {
        ticks.push(context.headers[SCHEDULE_TICK_HEADER] ?? 'none');
      }
    }
    for (let i = 0; i < 3; i++) {
      const bus = createBus({
        endpoint: 'heartbeat',
        broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
        scheduleStore: new RedisScheduleStore({ connection: redisUrl, prefix }),
        handlers: [HeartbeatHandler],
        logger: silentLogger,
      });
      buses.push(bus);
      await bus.every('heartbeat', { everyMs: EVERY_MS }, Heartbeat, { source: 'cron' });
    }
    await Promise.all(buses.map((bus) => bus.start()));
    const from = Date.now();
    await new Promise((resolve) => setTimeout(resolve, RUN_MS));
    expect(await buses[0]?.cancelEvery('heartbeat')).toBe(true);
    const to = Date.now();
    const expected = Math.floor(to / EVERY_MS) - Math.floor(from / EVERY_MS);
    await waitFor('the last ticks to be handled', () => ticks.length >= expected - 1, { timeoutMs: 10_000 });
    // The other buses find the schedule gone at their next tick; what they sent is handled by then.
    await new Promise((resolve) => setTimeout(resolve, 4 * EVERY_MS));

    expect(new Set(ticks).size).toBe(ticks.length);
    expect(Math.abs(ticks.length - expected)).toBeLessThanOrEqual(1);
    const times = ticks.map((t) => Date.parse(t)).sort((a, b) => a - b);
    for (let i = 1; i < times.length; i++) expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBe(EVERY_MS);
    expect(await admin.hlen(`${prefix}:sched:schedules`)).toBe(0);
  });
});
