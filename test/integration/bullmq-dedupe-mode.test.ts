import { Job, Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  uuidv7,
  type CommandDefinition,
  type MessageBus,
  type MessageContext,
} from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const schema = z.object({ orderId: z.string() });
/** The default: a second publish of an id is dropped for the broker's dedupe window. */
const ChargeInWindow = defineCommand('dedupe.ChargeInWindow', { schema });
/** The opt-in: a second publish of an id is dropped only while the first is queued. */
const ChargeWhileQueued = defineCommand('dedupe.ChargeWhileQueued', { schema, dedupe: 'while-queued' });

const modes = [
  ["'window' (the default)", ChargeInWindow],
  ["'while-queued'", ChargeWhileQueued],
] as const;

describe('BullMqBroker', () => {
  let prefix: string;
  let admin: Redis;
  let bus: MessageBus | undefined;
  let queue: Queue | undefined;

  beforeEach(() => {
    prefix = freshPrefix();
    admin = new Redis(redisUrl);
  });

  afterEach(async () => {
    await bus?.stop({ gracePeriodMs: 200 });
    bus = undefined;
    await queue?.close();
    queue = undefined;
    await deleteKeys(admin, prefix);
    await admin.quit();
  });

  /** A bus (not started) whose handler of `Charge` records each message id it handles. */
  function billing(Charge: CommandDefinition): { bus: MessageBus; handled: string[] } {
    const handled: string[] = [];
    @CommandHandler(Charge)
    class ChargeHandler {
      handle(_payload: unknown, context: MessageContext): void {
        handled.push(context.messageId);
      }
    }
    bus = createBus({
      endpoint: 'billing',
      broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
      handlers: [ChargeHandler],
      logger: silentLogger,
    });
    queue = new Queue(`cmd~${Charge.type}`, { connection: admin, prefix });
    return { bus, handled };
  }

  /** Sends a marker and waits until it is handled: what was queued before it has been handled by then. */
  async function drain(running: MessageBus, Charge: CommandDefinition, handled: string[]): Promise<string> {
    const marker = await running.send(Charge, { orderId: 'marker' });
    await waitFor('the marker to be handled', () => handled.includes(marker), { timeoutMs: 10_000 });
    return marker;
  }

  describe.each(modes)('with a definition whose dedupe is %s', (_mode, Charge) => {
    describe('when the same id is sent again while the first is still queued', () => {
      it('delivers it once', async () => {
        const { bus: running, handled } = billing(Charge);
        const id = uuidv7();
        await running.send(Charge, { orderId: 'o-1' }, { id });
        await running.send(Charge, { orderId: 'o-1' }, { id });
        expect(await queue?.getWaitingCount()).toBe(1);

        await running.start();
        const marker = await drain(running, Charge, handled);

        expect(handled).toEqual([id, marker]);
      });
    });
  });

  describe("with a definition whose dedupe is 'window' (the default)", () => {
    describe('when the same id is sent again after the first was handled and its job removed', () => {
      it('drops it: the deduplication key outlives the job', async () => {
        const { bus: running, handled } = billing(ChargeInWindow);
        await running.start();
        const id = await running.send(ChargeInWindow, { orderId: 'o-1' });
        await waitFor('the first copy to be handled and removed', async () => await gone(id), {
          timeoutMs: 10_000,
        });
        expect(await admin.exists(`${prefix}:cmd~${ChargeInWindow.type}:de:${id}`)).toBe(1);

        await running.send(ChargeInWindow, { orderId: 'o-1' }, { id });
        const marker = await drain(running, ChargeInWindow, handled);

        expect(handled).toEqual([id, marker]);
      });
    });
  });

  describe("with a definition whose dedupe is 'while-queued'", () => {
    describe('when the same id is sent again after the first was handled and its job removed', () => {
      it('delivers it again: nothing remembers the id once its job is gone', async () => {
        const { bus: running, handled } = billing(ChargeWhileQueued);
        await running.start();
        const id = await running.send(ChargeWhileQueued, { orderId: 'o-1' });
        await waitFor('the first copy to be handled and removed', async () => await gone(id), {
          timeoutMs: 10_000,
        });
        expect(await admin.exists(`${prefix}:cmd~${ChargeWhileQueued.type}:de:${id}`)).toBe(0);

        await running.send(ChargeWhileQueued, { orderId: 'o-1' }, { id });
        await waitFor('the second copy to be handled', () => handled.length === 2, { timeoutMs: 10_000 });

        expect(handled).toEqual([id, id]);
      });
    });
  });

  /** Whether the job of message `id` has been handled and removed from its queue. */
  async function gone(id: string): Promise<boolean> {
    if (queue === undefined) throw new Error('no queue: call billing() first');
    return (await Job.fromId(queue, id)) === undefined;
  }
});
