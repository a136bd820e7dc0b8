import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  upcasters,
  type BusOptions,
  type Logger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const buses: MessageBus[] = [];
const prefixes: string[] = [];

afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.stop({ gracePeriodMs: 200 })));
  const client = new Redis(redisUrl);
  for (const p of prefixes.splice(0)) await deleteKeys(client, p);
  client.disconnect();
});

function redisBus(p: string, options: BusOptions): MessageBus {
  const bus = createBus({
    broker: new BullMqBroker({ connection: redisUrl, prefix: p, partitions: 4, logger: silentLogger }),
    deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix: p }),
    logger: silentLogger,
    ...options,
  });
  buses.push(bus);
  return bus;
}

function versions(ordered: boolean) {
  const shape = { account: z.string() };
  const base = upcasters<{ account: string }>().step((v1) => ({ ...v1, v: 2 as const }));
  const V3 = defineCommand('it.Book', {
    version: 3,
    schema: z.object({ ...shape, v: z.literal(3) }),
    partitionKey: 'account',
    ordered,
    upcast: base.step((v2) => ({ account: v2.account, v: 3 as const })),
  });
  const V4 = defineCommand('it.Book', {
    version: 4,
    schema: z.object({ ...shape, v: z.literal(4) }),
    partitionKey: 'account',
    ordered,
    upcast: base
      .step((v2) => ({ account: v2.account, v: 3 as const }))
      .step((v3) => ({ ...v3, v: 4 as const })),
  });
  return { V3, V4 };
}

describe('versioned messages on Redis', () => {
  describe.each([false, true])(
    'when a version-3 worker meets a version-4 command (ordered: %s)',
    (ordered) => {
      it('releases it without spending attempts until a version-4 worker handles it', async () => {
        const p = `{hver-${randomUUID().slice(0, 8)}}`;
        prefixes.push(p);
        const { V3, V4 } = versions(ordered);
        const warnings: Record<string, unknown>[] = [];
        const logger: Logger = {
          ...silentLogger,
          warn: (message, fields) => {
            if (message.startsWith('Message is newer than this code')) warnings.push(fields ?? {});
          },
        };
        const handled: string[] = [];
        @CommandHandler(V3)
        class BookV3 {
          handle(): void {
            handled.push('v3');
          }
        }
        @CommandHandler(V4)
        class BookV4 {
          handle(payload: PayloadOf<typeof V4>, ctx: MessageContext): void {
            handled.push(`v4 ${payload.v} attempt ${ctx.attempt}`);
          }
        }
        const worker3 = redisBus(p, { endpoint: 'booking', handlers: [BookV3], logger });
        const sender = redisBus(p, { endpoint: 'web', definitions: [V4] });
        await worker3.start();
        await sender.send(V4, { account: 'a-1', v: 4 });
        await expect.poll(() => warnings.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
        expect(warnings[0]).toMatchObject({ type: 'it.Book', version: 4, knownVersion: 3, attempt: 1 });
        expect(warnings.every((w) => w.attempt === 1)).toBe(true);
        expect(handled).toEqual([]);
        expect(await worker3.deadLetters.count()).toBe(0);

        await worker3.stop({ gracePeriodMs: 200 });
        const worker4 = redisBus(p, { endpoint: 'booking', handlers: [BookV4] });
        await worker4.start();
        await expect.poll(() => handled, { timeout: 10_000 }).toEqual(['v4 4 attempt 1']);
        expect(await worker4.deadLetters.count()).toBe(0);
      });
    },
  );
});
