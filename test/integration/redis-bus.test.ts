import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  HarrierError,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type BusOptions,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { partitionOf, prepareMessage } from '../../src/extend.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const Charge = defineCommand('it.Charge', { schema: z.object({ orderId: z.string() }) });
const Placed = defineEvent('it.Placed', { schema: z.object({ orderId: z.string() }) });
const Post = defineCommand('it.Post', {
  schema: z.object({ account: z.string(), n: z.number() }),
  partitionKey: 'account',
  ordered: true,
});

const buses: MessageBus[] = [];
const prefixes: string[] = [];

function prefix(): string {
  const p = `{hit-${randomUUID().slice(0, 8)}}`;
  prefixes.push(p);
  return p;
}

function redisBus(p: string, options: BusOptions): MessageBus {
  const bus = createBus({
    broker: new BullMqBroker({ connection: redisUrl, prefix: p, partitions: 4, logger: silentLogger }),
    deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix: p }),
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
  await Promise.all(buses.splice(0).map((b) => b.stop({ gracePeriodMs: 200 })));
  const client = new Redis(redisUrl);
  for (const p of prefixes.splice(0)) await deleteKeys(client, p);
  client.disconnect();
});

describe('MessageBus on BullMqBroker', () => {
  describe('when an event has subscriptions on two endpoints and one keeps failing', () => {
    it('handles it once in the healthy one and dead-letters it in Redis for the failing one', async () => {
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
      const shipping = redisBus(p, { endpoint: 'shipping', handlers: [Shipping] });
      const crm = redisBus(p, { endpoint: 'crm', handlers: [Crm] });
      const publisher = redisBus(p, { endpoint: 'web', definitions: [Placed] });
      await shipping.start();
      await crm.start();
      const id = await publisher.publish(Placed, { orderId: 'o-1' });
      await waitFor(async () => (await crm.deadLetters.count()) === 1 && healthy.length === 1);
      // A second copy for Shipping would be in its queue ahead of this marker.
      await publisher.publish(Placed, { orderId: 'marker' });
      await waitFor(() => healthy.includes('marker'));
      expect(healthy).toEqual(['o-1', 'marker']);
      expect(failing).toBe(3);
      const [record] = (await crm.deadLetters.list()).records;
      expect(record).toMatchObject({
        messageId: id,
        endpoint: 'crm',
        handler: 'Crm',
        reason: 'handler-failed',
        attemptCount: 3,
      });
      expect(record?.attempts.map((a) => a.error.message)).toEqual(['CRM down', 'CRM down', 'CRM down']);
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
      const bus = redisBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const id = await bus.send(Charge, { orderId: 'o-9' });
      await waitFor(async () => (await bus.deadLetters.count()) === 1);
      healthy = true;
      const [record] = (await bus.deadLetters.list()).records;
      const results = await bus.replayDeadLetters([record!.id, 'no-such-id'], { by: 'test' });
      expect(results.map((r) => r.ok)).toEqual([true, false]);
      await waitFor(() => attempts.length === 3);
      expect(attempts).toEqual([
        { id, attempt: 1 },
        { id, attempt: 2 },
        { id, attempt: 1 },
      ]);
      const replayed = await bus.deadLetters.get(record!.id);
      expect(replayed?.status).toBe('replayed');
      expect(replayed?.replays.map((r) => r.by)).toEqual(['test']);
    });
  });

  describe('when a dead letter is replayed after BullMQ removed its failed job', () => {
    it('adds the message again under the same id and handles it', async () => {
      const p = prefix();
      let healthy = false;
      const handled: string[] = [];
      @CommandHandler(Charge, { retry: { attempts: 1 } })
      class Handler {
        handle(_: unknown, ctx: MessageContext) {
          if (!healthy) throw new Error('gateway down');
          handled.push(ctx.messageId);
        }
      }
      const bus = redisBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const id = await bus.send(Charge, { orderId: 'o-10' });
      await waitFor(async () => (await bus.deadLetters.count()) === 1);
      const queue = new Queue(`cmd~${Charge.type}`, { connection: { url: redisUrl }, prefix: p });
      expect(await queue.getJobState(id)).toBe('failed');
      await queue.remove(id);
      await queue.close();
      healthy = true;
      const [record] = (await bus.deadLetters.list()).records;
      expect((await bus.replayDeadLetters([record!.id]))[0]?.ok).toBe(true);
      await waitFor(() => handled.length === 1);
      expect(handled).toEqual([id]);
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
          // Two messages of key a at once would break the order; a and b may overlap.
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
      const bus = redisBus(p, { endpoint: 'ledger', handlers: [Handler] });
      await bus.start();
      for (let n = 1; n <= 4; n++) await bus.send(Post, { account: 'a', n });
      await bus.send(Post, { account: 'b', n: 1 });
      await waitFor(
        () => log.filter((l) => l.startsWith('a') && !l.endsWith('!')).length === 4 && log.includes('b1'),
      );
      expect(log.filter((l) => l.startsWith('a'))).toEqual(['a1!', 'a1!', 'a1', 'a2', 'a3', 'a4']);
      // Key b is in another partition: it is not held up by a1's retries (300 + 600 ms of backoff).
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
      const one = redisBus(p, { endpoint: 'ledger', handlers: [makeHandler()] });
      const two = redisBus(p, { endpoint: 'ledger', handlers: [makeHandler()] });
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
      const bus = redisBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const sentAt = Date.now();
      await bus.schedule(Charge, { orderId: 'later' }, { delayMs: 400 });
      await waitFor(() => handledAt > 0);
      expect(handledAt - sentAt).toBeGreaterThanOrEqual(400);
    });
  });

  describe('.cancelScheduled', () => {
    it('takes back a scheduled command: only the one not cancelled is handled', async () => {
      const p = prefix();
      const handled: string[] = [];
      @CommandHandler(Charge)
      class Handler {
        handle(command: { orderId: string }) {
          handled.push(command.orderId);
        }
      }
      const bus = redisBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const id = await bus.schedule(Charge, { orderId: 'cancelled' }, { delayMs: 300 });
      await bus.schedule(Charge, { orderId: 'kept' }, { delayMs: 500 });

      expect(await bus.cancelScheduled(id)).toBe(true);

      await waitFor(() => handled.length > 0);
      expect(handled).toEqual(['kept']);
      expect(await bus.cancelScheduled(id)).toBe(false);
    });
  });

  describe('when a job hash holds data that is not JSON', () => {
    it('dead-letters it as malformed with the raw text instead of stalling forever', async () => {
      const p = prefix();
      @CommandHandler(Charge)
      class Handler {
        handle() {
          return undefined;
        }
      }
      const bus = redisBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const queue = new Queue(`cmd~${Charge.type}`, { connection: { url: redisUrl }, prefix: p });
      // Delayed, so no worker takes it before its data is overwritten below.
      const job = await queue.add(Charge.type, { b: 'placeholder' }, { delay: 300 });
      const client = new Redis(redisUrl);
      await client.hset(`${p}:cmd~${Charge.type}:${job.id!}`, 'data', '{not json');
      client.disconnect();
      await queue.close();
      await waitFor(async () => (await bus.deadLetters.count()) === 1);
      const [record] = (await bus.deadLetters.list()).records;
      expect(record?.reason).toBe('malformed');
      expect(record?.envelope).toBe('{not json');
    });
  });

  describe('when a delivery has already used up its attempts (its workers died mid-handler)', () => {
    it('dead-letters it without calling the handler', async () => {
      const p = prefix();
      let called = 0;
      @CommandHandler(Charge, { retry: { attempts: 3 } })
      class Handler {
        handle() {
          called++;
        }
      }
      const bus = redisBus(p, { endpoint: 'billing', handlers: [Handler] });
      await bus.start();
      const { outgoing } = prepareMessage(Charge, { orderId: 'x' }, {}, { now: Date.now() });
      const queue = new Queue(`cmd~${Charge.type}`, { connection: { url: redisUrl }, prefix: p });
      await queue.add(
        Charge.type,
        { b: outgoing.body, i: outgoing.id, k: 'command', a: 3, h: [] },
        { jobId: outgoing.id },
      );
      await queue.close();
      await waitFor(async () => (await bus.deadLetters.count()) === 1);
      expect(called).toBe(0);
      expect((await bus.deadLetters.list()).records[0]).toMatchObject({
        messageId: outgoing.id,
        attemptCount: 4,
      });
    });
  });
});

describe('BullMqBroker', () => {
  describe('.receiver when its iteration begins after the broker closed', () => {
    it('ends at once and starts no worker', async () => {
      const p = prefix();
      const broker = new BullMqBroker({ connection: redisUrl, prefix: p, logger: silentLogger });
      await broker.register('billing', [{ handler: 'ChargeHandler', kind: 'command', types: [Charge.type] }]);
      const iterator = broker.receiver({ endpoint: 'billing' })[Symbol.asyncIterator]();
      await broker.close();
      await expect(iterator.next()).resolves.toEqual({ done: true, value: undefined });
      const queue = new Queue(`cmd~${Charge.type}`, { connection: new Redis(redisUrl), prefix: p });
      try {
        expect(await queue.getWorkersCount()).toBe(0);
      } finally {
        await queue.close();
        await queue.disconnect();
      }
    });
  });

  describe('.receiver when it is asked for only after the broker closed', () => {
    it('ends at once, starts no worker and leaves the waiting job in its queue', async () => {
      const p = prefix();
      const broker = new BullMqBroker({ connection: redisUrl, prefix: p, logger: silentLogger });
      await broker.register('billing', [{ handler: 'ChargeHandler', kind: 'command', types: [Charge.type] }]);
      const message = prepareMessage(Charge, { orderId: 'o-1' }, {}, { now: Date.now() }).outgoing;
      await broker.publish(message);
      await broker.close();
      const iterator = broker.receiver({ endpoint: 'billing' })[Symbol.asyncIterator]();
      const queue = new Queue(`cmd~${Charge.type}`, { connection: new Redis(redisUrl), prefix: p });
      let first: IteratorResult<unknown> | undefined;
      try {
        first = await iterator.next();
        expect(first).toEqual({ done: true, value: undefined });
        expect(await queue.getWorkersCount()).toBe(0);
        expect(await queue.getJobCounts('wait', 'active')).toEqual({ wait: 1, active: 0 });
      } finally {
        // A receiver that did take the job holds it until it is settled: give it back so the test ends.
        const taken = first?.value as { id: string } | undefined;
        if (taken !== undefined) await broker.nack(taken.id, { release: true });
        await iterator.return?.();
        await queue.close();
        await queue.disconnect();
      }
    });
  });

  describe('.publish of one message id twice', () => {
    it('delivers it once within dedupeWindowMs, and again once the window has passed', async () => {
      const p = prefix();
      const handled: string[] = [];
      @CommandHandler(Charge)
      class Handler {
        handle(_payload: PayloadOf<typeof Charge>, context: MessageContext) {
          handled.push(context.messageId);
        }
      }
      const windowMs = 1_500;
      const broker = new BullMqBroker({
        connection: redisUrl,
        prefix: p,
        dedupeWindowMs: windowMs,
        logger: silentLogger,
      });
      const bus = createBus({ endpoint: 'billing', broker, handlers: [Handler], logger: silentLogger });
      buses.push(bus);
      const queue = new Queue(`cmd~${Charge.type}`, { connection: new Redis(redisUrl), prefix: p });
      try {
        await bus.start();
        const message = prepareMessage(Charge, { orderId: 'o-1' }, {}, { now: Date.now() }).outgoing;
        const publishedAt = Date.now();
        await broker.publish(message);
        await waitFor(() => handled.length === 1);
        // Within the window, even after the first copy was handled and its job removed: dropped.
        await broker.publish(message);
        const marker = await bus.send(Charge, { orderId: 'marker' });
        await waitFor(() => handled.includes(marker));
        const counts = await queue.getJobCounts('wait', 'active', 'delayed', 'prioritized');
        expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(0);
        expect(handled).toEqual([message.id, marker]);
        // The window is the deduplication key's time to live: once it has expired, the id is new again.
        await waitFor(async () => (await queue.getDeduplicationJobId(message.id)) === null, windowMs + 5_000);
        expect(Date.now() - publishedAt).toBeGreaterThanOrEqual(windowMs - 50);
        await broker.publish(message);
        await waitFor(() => handled.length === 3);
        expect(handled).toEqual([message.id, marker, message.id]);
      } finally {
        await queue.close();
        await queue.disconnect();
      }
    });
  });

  describe('.receiver', () => {
    it("builds the delivery id from the job's lock token, and refuses it once the delivery is settled", async () => {
      const p = prefix();
      const broker = new BullMqBroker({ connection: redisUrl, prefix: p, logger: silentLogger });
      const admin = new Redis(redisUrl);
      const stop = new AbortController();
      try {
        await broker.register('billing', [
          { kind: 'command', handler: 'ChargeHandler', types: [Charge.type] },
        ]);
        const message = prepareMessage(Charge, { orderId: 'o-1' }, {}, { now: Date.now() }).outgoing;
        await broker.publish(message);
        const receiver = broker.receiver({ endpoint: 'billing', signal: stop.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const first = await iterator.next();
        if (first.done === true) throw new Error('the receiver ended without a delivery');
        const delivery = first.value;
        expect(delivery.facts.messageId).toBe(message.id);
        const lock = await admin.get(`${p}:cmd~${Charge.type}:${message.id}:lock`);
        expect(lock).not.toBeNull();
        expect(delivery.id).toBe(`${lock ?? ''}|${message.id}|1`);

        await broker.ack(delivery.id);
        await expect(broker.ack(delivery.id)).rejects.toMatchObject({ code: 'stale-delivery' });
        stop.abort();
        await iterator.return?.(undefined);
      } finally {
        stop.abort();
        await broker.close();
        admin.disconnect();
      }
    });
  });

  describe('when an endpoint starts with several queues', () => {
    it('opens one shared command connection for its workers and one blocking connection per queue', async () => {
      const p = prefix();
      @CommandHandler(Charge)
      class ChargeHandler {
        handle() {}
      }
      @CommandHandler(Post)
      class PostHandler {
        handle() {}
      }
      @EventHandler(Placed)
      class PlacedHandler {
        handle() {}
      }
      const broker = new BullMqBroker({
        connection: redisUrl,
        prefix: p,
        partitions: 4,
        logger: silentLogger,
      });
      const bus = createBus({
        endpoint: 'shop',
        broker,
        handlers: [ChargeHandler, PostHandler, PlacedHandler],
        logger: silentLogger,
      });
      buses.push(bus);
      const admin = new Redis(redisUrl);
      // Connections of this test's prefix, by name (ioredis and BullMQ name every one they open).
      const names = async (): Promise<string[]> =>
        ((await admin.client('LIST')) as string)
          .split('\n')
          .map((line) => / name=(\S*)/.exec(line)?.[1] ?? '')
          .filter((name) => name.startsWith(`${p}:`));
      try {
        await bus.start();
        // Charge, Post and its 4 partitions, and the Placed subscription.
        const queues = broker.queuesOf('shop');
        expect(queues).toHaveLength(7);
        const blocking = (list: string[]): string[] =>
          list.filter((name) => !name.startsWith(`${p}:harrier:`));
        await waitFor(async () => blocking(await names()).length === queues.length);
        const connected = await names();
        expect(connected.filter((name) => name === `${p}:harrier:workers:shop`)).toHaveLength(1);
        expect(connected.filter((name) => name === `${p}:harrier:producer`)).toHaveLength(1);
        expect(connected).toHaveLength(queues.length + 2);
      } finally {
        admin.disconnect();
      }
    });
  });

  describe('.publish', () => {
    describe('when Redis cannot be reached', () => {
      it('fails fast with redis-unavailable naming REDIS_URL', async () => {
        const broker = new BullMqBroker({
          connection: 'redis://127.0.0.1:1',
          publishTimeoutMs: 1000,
          logger: silentLogger,
        });
        const bus = createBus({ broker, definitions: [Charge], logger: silentLogger });
        const started = Date.now();
        const error = (await bus.send(Charge, { orderId: 'x' }).catch((e: unknown) => e)) as {
          code?: string;
          message: string;
        };
        expect(Date.now() - started).toBeLessThan(3000);
        expect(error.code).toBe('redis-unavailable');
        expect(error.message).toContain('REDIS_URL');
        await broker.close();
      });
    });
  });

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
        retry: { attempts: 3, immediate: 0, backoff: { baseMs: 50, jitter: 0 } },
      });
      await bus.start();
      const hungId = await bus.send(Charge, { orderId: 'hung' });
      for (const orderId of ['a', 'b', 'c', 'd']) await bus.send(Charge, { orderId });

      await waitFor(async () => (await bus.deadLetters.count()) === 1 && handled.length === 4, 15_000);

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
