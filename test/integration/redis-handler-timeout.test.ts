import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  HarrierError,
  createBus,
  defineCommand,
  silentLogger,
  type BusOptions,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const Charge = defineCommand('it.timeout.Charge', { schema: z.object({ orderId: z.string() }) });

const buses: MessageBus[] = [];
const prefixes: string[] = [];

function prefix(): string {
  const p = `{hto-${randomUUID().slice(0, 8)}}`;
  prefixes.push(p);
  return p;
}

function redisBus(p: string, options: BusOptions): MessageBus {
  const bus = createBus({
    broker: new BullMqBroker({ connection: redisUrl, prefix: p, partitions: 4, logger: silentLogger }),
    deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix: p }),
    logger: silentLogger,
    retry: { attempts: 3, backoff: { baseMs: 50, jitter: 0 } },
    ...options,
  });
  buses.push(bus);
  return bus;
}

function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const tick = async (): Promise<void> => {
      if (await condition()) resolve();
      else if (Date.now() > deadline) reject(new Error('condition not met in time'));
      else setTimeout(() => void tick(), 25);
    };
    void tick();
  });
}

afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.stop({ gracePeriodMs: 200 })));
  const client = new Redis(redisUrl);
  for (const p of prefixes.splice(0)) await deleteKeys(client, p);
  client.disconnect();
});

describe('MessageBus on BullMqBroker', () => {
  describe('when a handler never settles on an endpoint of concurrency 1', () => {
    it('handles the other messages, and retries then dead-letters the hung one with handler-timeout', async () => {
      const p = prefix();
      const handled: string[] = [];
      const hung: { attempt: number; signal: AbortSignal }[] = [];
      @CommandHandler(Charge)
      class ChargeHandler {
        handle(payload: PayloadOf<typeof Charge>, ctx: MessageContext): Promise<void> {
          if (payload.orderId === 'hung') {
            hung.push({ attempt: ctx.attempt, signal: ctx.signal });
            return new Promise(() => undefined);
          }
          handled.push(payload.orderId);
          return Promise.resolve();
        }
      }
      const bus = redisBus(p, {
        endpoint: 'billing',
        handlers: [ChargeHandler],
        concurrency: 1,
        handlerTimeoutMs: 300,
      });
      await bus.start();
      const hungId = await bus.send(Charge, { orderId: 'hung' });
      for (const orderId of ['a', 'b', 'c', 'd']) await bus.send(Charge, { orderId });

      await waitFor(async () => (await bus.deadLetters.count()) === 1 && handled.length === 4);

      expect(handled.sort()).toEqual(['a', 'b', 'c', 'd']);
      expect(hung.map((h) => h.attempt)).toEqual([1, 2, 3]);
      expect(hung.every((h) => HarrierError.is(h.signal.reason, 'handler-timeout'))).toBe(true);
      const [record] = (await bus.deadLetters.list()).records;
      expect(record).toMatchObject({
        messageId: hungId,
        endpoint: 'billing',
        handler: 'ChargeHandler',
        reason: 'handler-failed',
        attemptCount: 3,
        error: { code: 'handler-timeout' },
      });
      expect(record?.attempts.map((a) => a.error.code)).toEqual([
        'handler-timeout',
        'handler-timeout',
        'handler-timeout',
      ]);

      // Nothing holds the endpoint's one slot: a stop needs none of its grace period.
      const started = Date.now();
      await bus.stop({ gracePeriodMs: 10_000 });
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  });
});
