import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type BusOptions,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { partitionOf } from '../../src/extend.js';
import { InMemoryDeliveryLedger } from '../../src/broker/in-memory-delivery-ledger.js';
import { RabbitMqBroker } from '../../src/rabbitmq/index.js';
import { dropConnectionOf } from '../../src/rabbitmq/rabbitmq-broker.js';
import { MAX_EXCUSED_ENDS } from '../../src/rabbitmq/outage-returns.js';
import { freshBrokerPrefix, rabbitmqUrl } from '../helpers/rabbitmq.js';

const Charge = defineCommand('it.Charge', { schema: z.object({ orderId: z.string() }) });
const Placed = defineEvent('it.Placed', { schema: z.object({ orderId: z.string() }) });
const Post = defineCommand('it.Post', {
  schema: z.object({ account: z.string(), n: z.number() }),
  partitionKey: 'account',
  ordered: true,
});

const filePrefix = freshBrokerPrefix();
let url: string;

beforeAll(async () => {
  url = await rabbitmqUrl();
}, 60_000);
let made = 0;
const buses: MessageBus[] = [];

/** A prefix of its own for one test's buses. */
function prefix(): string {
  return `${filePrefix}-${String(++made)}`;
}

function rabbitBus(p: string, options: BusOptions): MessageBus {
  const bus = createBus({
    broker: new RabbitMqBroker({ connection: url, prefix: p, partitions: 4, logger: silentLogger }),
    logger: silentLogger,
    retry: { backoff: { baseMs: 50, jitter: 0 } },
    ...options,
  });
  buses.push(bus);
  return bus;
}

function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
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
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 200 })));
});

describe('MessageBus on RabbitMqBroker', () => {
  describe('when an event has subscriptions on two endpoints and one keeps failing', () => {
    it('handles it once in the healthy one and dead-letters it for the failing one after its attempts', async () => {
      const p = prefix();
      const healthy: string[] = [];
      let failing = 0;
      @EventHandler(Placed)
      class Shipping {
        handle(payload: PayloadOf<typeof Placed>) {
          healthy.push(payload.orderId);
        }
      }
      @EventHandler(Placed, { retry: { attempts: 3 } })
      class Crm {
        handle(payload: PayloadOf<typeof Placed>): never {
          if (payload.orderId === 'o-1') failing++;
          throw new Error('CRM down');
        }
      }
      const shipping = rabbitBus(p, { endpoint: 'shipping', handlers: [Shipping] });
      const crm = rabbitBus(p, { endpoint: 'crm', handlers: [Crm] });
      const publisher = rabbitBus(p, { endpoint: 'web', definitions: [Placed] });
      await shipping.start();
      await crm.start();
      const id = await publisher.publish(Placed, { orderId: 'o-1' });
      await waitFor(async () => (await crm.deadLetters.count()) === 1 && healthy.length === 1);
      expect(failing).toBe(3);
      const [record] = (await crm.deadLetters.list()).records;
      expect(record).toMatchObject({ messageId: id, endpoint: 'crm', handler: 'Crm', attemptCount: 3 });
    });
  });

  describe('when a dead letter is replayed', () => {
    it('re-dispatches the same message id to the same subscription with attempts reset', async () => {
      const p = prefix();
      let healthy = false;
      const attempts: { id: string; attempt: number }[] = [];
      @CommandHandler(Charge, { retry: { attempts: 2 } })
      class Handler {
        handle(_: unknown, ctx: MessageContext) {
          attempts.push({ id: ctx.messageId, attempt: ctx.attempt });
          if (!healthy) throw new Error('gateway down');
        }
      }
      const bus = rabbitBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const id = await bus.send(Charge, { orderId: 'o-9' });
      await waitFor(async () => (await bus.deadLetters.count()) === 1);
      healthy = true;
      const [record] = (await bus.deadLetters.list()).records;
      const results = await bus.replayDeadLetters([record!.id], { by: 'test' });
      expect(results.map((r) => r.ok)).toEqual([true]);
      await waitFor(() => attempts.length === 3);
      expect(attempts).toEqual([
        { id, attempt: 1 },
        { id, attempt: 2 },
        { id, attempt: 1 },
      ]);
      await waitFor(async () => (await bus.deadLetters.get(record!.id))?.status === 'replayed');
    });
  });

  describe('when ordered messages of one key are sent and the first fails twice', () => {
    it('handles them one at a time in publish order, retries included, without holding up other keys', async () => {
      const p = prefix();
      const log: string[] = [];
      let failures = 0;
      let runningA = 0;
      let overlap = false;
      @CommandHandler(Post, { retry: { immediate: 0, backoff: { baseMs: 300, jitter: 0 } } })
      class Handler {
        async handle(payload: PayloadOf<typeof Post>) {
          const isA = payload.account === 'a';
          if (isA && ++runningA > 1) overlap = true;
          await new Promise((r) => setTimeout(r, 5));
          if (isA) runningA--;
          if (payload.account === 'a' && payload.n === 1 && failures < 2) {
            failures++;
            log.push(`a1!`);
            throw new Error('conflict');
          }
          log.push(`${payload.account}${payload.n}`);
        }
      }
      const bus = rabbitBus(p, { endpoint: 'ledger', handlers: [Handler] });
      await bus.start();
      for (let n = 1; n <= 4; n++) await bus.send(Post, { account: 'a', n });
      await bus.send(Post, { account: 'b', n: 1 });
      await waitFor(
        () => log.filter((l) => l.startsWith('a') && !l.endsWith('!')).length === 4 && log.includes('b1'),
      );
      expect(log.filter((l) => l.startsWith('a'))).toEqual(['a1!', 'a1!', 'a1', 'a2', 'a3', 'a4']);
      expect(partitionOf('a', 4)).not.toBe(partitionOf('b', 4));
      expect(log.indexOf('b1')).toBeLessThan(log.indexOf('a2'));
      expect(overlap).toBe(false);
    });
  });

  describe('when two processes of one endpoint share an ordered key', () => {
    it('never handles two messages of the key at once, and keeps publish order', async () => {
      const p = prefix();
      const seen: number[] = [];
      let running = 0;
      let peak = 0;
      const makeHandler = () => {
        @CommandHandler(Post)
        class Handler {
          async handle(payload: PayloadOf<typeof Post>) {
            running++;
            peak = Math.max(peak, running);
            await new Promise((r) => setTimeout(r, 5));
            seen.push(payload.n);
            running--;
          }
        }
        return Handler;
      };
      const one = rabbitBus(p, { endpoint: 'ledger', handlers: [makeHandler()] });
      const two = rabbitBus(p, { endpoint: 'ledger', handlers: [makeHandler()] });
      await one.start();
      await two.start();
      for (let n = 1; n <= 20; n++) await one.send(Post, { account: 'shared', n });
      await waitFor(() => seen.length === 20);
      expect(peak).toBe(1);
      expect(seen).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    });
  });

  describe('.schedule', () => {
    it('delivers the command no sooner than its delay', async () => {
      const p = prefix();
      let handledAt = 0;
      @CommandHandler(Charge)
      class Handler {
        handle() {
          handledAt = Date.now();
        }
      }
      const bus = rabbitBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const sentAt = Date.now();
      await bus.schedule(Charge, { orderId: 'later' }, { delayMs: 400 });
      await waitFor(() => handledAt > 0);
      expect(handledAt - sentAt).toBeGreaterThanOrEqual(400);
    });
  });

  describe('with a delivery ledger, when every delivery of a message drops the connection of the process handling it', () => {
    it('dead-letters it as worker-crashed after the excused returns and crashLimit more: nothing runs for ever', async () => {
      const p = prefix();
      let runs = 0;
      const broker = new RabbitMqBroker({
        connection: url,
        prefix: p,
        partitions: 4,
        logger: silentLogger,
        ledger: new InMemoryDeliveryLedger(),
      });
      // As a handler that blocks the event loop past twice the heartbeat: its connection drops
      // under it, and its own settlement cannot reach RabbitMQ.
      @CommandHandler(Charge)
      class Handler {
        async handle(): Promise<never> {
          runs++;
          await dropConnectionOf(broker);
          throw new Error('the connection dropped under the handler');
        }
      }
      const bus = createBus({ broker, logger: silentLogger, endpoint: 'billing', handlers: [Handler] });
      buses.push(bus);
      await bus.start();
      const id = await bus.send(Charge, { orderId: 'poison' });
      await waitFor(async () => (await bus.deadLetters.count()) === 1, 30_000);
      const [record] = (await bus.deadLetters.list()).records;
      expect(record).toMatchObject({ messageId: id, reason: 'worker-crashed' });
      // crashLimit is 3: at most MAX_EXCUSED_ENDS returns were excused as outages.
      expect(runs).toBe(MAX_EXCUSED_ENDS + 3);
    }, 40_000);
  });
});
