/**
 * Per-key lanes of RabbitMqBroker's partition queues against real RabbitMQ: a key waiting for its
 * retry, with a backlog longer than the receiver's concurrency behind it, holds up no other key of
 * its partition (as on the in-memory and PostgreSQL brokers); a key whose waiting messages moved to
 * the tail of the queue keeps its order when the connection drops before their copies are back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { silentLogger, type Logger } from '../../src/logging/logger.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import {
  dropConnectionOf,
  RabbitMqBroker,
  type RabbitMqBrokerOptions,
} from '../../src/rabbitmq/rabbitmq-broker.js';
import { waitFor } from '../helpers/local-redis.js';
import { freshBrokerPrefix, rabbitmqUrl } from '../helpers/rabbitmq.js';
import { entry, nextOf, POST } from '../helpers/rabbitmq-lanes.js';

const filePrefix = freshBrokerPrefix();
let url: string;
const brokers: RabbitMqBroker[] = [];

beforeAll(async () => {
  url = await rabbitmqUrl();
}, 60_000);

afterAll(async () => {
  await Promise.all(brokers.map((broker) => broker.close()));
});

/**
 * A broker on `<file prefix>-<name>` with one partition (closed in `afterAll`), its endpoint
 * `accounts` registered for ordered POSTs.
 */
async function accountsBroker(
  name: string,
  options: Partial<RabbitMqBrokerOptions> = {},
): Promise<RabbitMqBroker> {
  const broker = new RabbitMqBroker({
    connection: url,
    prefix: `${filePrefix}-${name}`,
    partitions: 1,
    logger: silentLogger,
    ...options,
  });
  brokers.push(broker);
  await broker.register('accounts', [
    { handler: 'commands', kind: 'command', types: [POST], orderedTypes: [POST] },
  ]);
  return broker;
}

/** Takes the first delivery, a1, and has it retried `ms` from now: the time it is due. */
async function retryFirstA(
  broker: RabbitMqBroker,
  deliveries: AsyncIterator<Delivery>,
  ms: number,
): Promise<number> {
  const first = await nextOf(deliveries);
  expect(first.body).toBe('a1');
  const retryAt = Date.now() + ms;
  await broker.nack(first.id, { retryAt, error: { name: 'Error', message: 'try later' } });
  return retryAt;
}

describe('RabbitMqBroker partition queues', () => {
  describe('when a key waits for its retry with more messages behind it than the receiver takes at once', () => {
    it('delivers another key of the same partition before the retry, then the key in order', async () => {
      // One partition: both keys share it whatever their hash.
      const broker = await accountsBroker('backlog');
      const concurrency = 2;
      const behind = 3 * concurrency;
      const a = Array.from({ length: behind + 1 }, (_, i) => entry('account-a', `a${i + 1}`));
      const b1 = entry('account-b', 'b1');
      for (const message of [...a, b1]) await broker.publish(message);

      const stop = new AbortController();
      const receiver = broker.receiver({ endpoint: 'accounts', prefetch: concurrency, signal: stop.signal });
      const deliveries = receiver[Symbol.asyncIterator]();
      try {
        const retryAt = await retryFirstA(broker, deliveries, 2_000);

        const other = await nextOf(deliveries);
        expect(other.body).toBe('b1');
        expect(Date.now()).toBeLessThan(retryAt);
        await broker.ack(other.id);

        const retried = await nextOf(deliveries);
        expect(retried.body).toBe('a1');
        expect(retried.facts.attempt).toBe(2);
        expect(Date.now()).toBeGreaterThanOrEqual(retryAt);
        await broker.ack(retried.id);
        const rest: string[] = [];
        for (let i = 0; i < behind; i++) {
          const next = await nextOf(deliveries);
          rest.push(next.body);
          expect(next.facts.attempt).toBe(1);
          await broker.ack(next.id);
        }
        expect(rest).toEqual(a.slice(1).map((message) => message.body));
      } finally {
        stop.abort();
      }
    });

    it('holds up the other keys of the partition once the waiting key fills partitionPrefetch (the limit)', async () => {
      const broker = await accountsBroker('full', { partitionPrefetch: 4 });
      const a = Array.from({ length: 4 }, (_, i) => entry('account-a', `a${i + 1}`));
      for (const message of [...a, entry('account-b', 'b1')]) await broker.publish(message);

      const stop = new AbortController();
      const receiver = broker.receiver({ endpoint: 'accounts', prefetch: 2, signal: stop.signal });
      const deliveries = receiver[Symbol.asyncIterator]();
      try {
        const retryAt = await retryFirstA(broker, deliveries, 1_000);
        const next = await nextOf(deliveries);
        expect(next.body).toBe('a1');
        expect(Date.now()).toBeGreaterThanOrEqual(retryAt);
        await broker.ack(next.id);
      } finally {
        stop.abort();
      }
    });
  });

  describe('when an unordered message waits in a busy receiver longer than holdLimitMs', () => {
    it('gives it back to its queue, uncounted, where an idle process takes it', async () => {
      const prefix = `${filePrefix}-hold`;
      const options = { connection: url, prefix, partitions: 1, holdLimitMs: 1_000, logger: silentLogger };
      const busy = new RabbitMqBroker(options);
      const idle = new RabbitMqBroker(options);
      brokers.push(busy, idle);
      const subscriptions = [
        { handler: 'first', kind: 'command' as const, types: ['accounts.First'] },
        { handler: 'second', kind: 'command' as const, types: ['accounts.Second'] },
      ];
      await busy.register('accounts', subscriptions);
      await idle.register('accounts', subscriptions);
      const stop = new AbortController();
      const busyReceiver = busy.receiver({ endpoint: 'accounts', prefetch: 1, signal: stop.signal });
      const busyDeliveries = busyReceiver[Symbol.asyncIterator]();
      try {
        await busy.publish({ id: uuidv7(), kind: 'command', type: 'accounts.First', body: 'first' });
        const held = await nextOf(busyDeliveries);
        expect(held.body).toBe('first');
        // Its handler runs on; the second queue's message waits in the busy receiver.
        await busy.publish({ id: uuidv7(), kind: 'command', type: 'accounts.Second', body: 'second' });
        await new Promise((resolve) => setTimeout(resolve, 300));
        const idleReceiver = idle.receiver({ endpoint: 'accounts', prefetch: 1, signal: stop.signal });
        const idleDeliveries = idleReceiver[Symbol.asyncIterator]();
        const moved = await nextOf(idleDeliveries, 5_000);
        expect(moved.body).toBe('second');
        expect(moved.facts).toMatchObject({ attempt: 1, unsettledEnds: 0 });
        await idle.ack(moved.id);
        await busy.ack(held.id);
      } finally {
        stop.abort();
      }
    });
  });
  describe('when the connection drops while a key moves to the tail, with more of it queued ahead of its copies', () => {
    it('still delivers the key in order on the new channel', async () => {
      const logged: string[] = [];
      const logger: Logger = { ...silentLogger, debug: (message) => logged.push(message) };
      const broker = await accountsBroker('rotate-drop', {
        partitionPrefetch: 4,
        holdLimitMs: 1_000,
        logger,
      });
      // The window takes a1..a3 and b1; a4 waits in the queue behind the b's.
      const a = ['a1', 'a2', 'a3'].map((body) => entry('account-a', body));
      const b = Array.from({ length: 6 }, (_, i) => entry('account-b', `b${i + 1}`));
      for (const message of [...a, ...b, entry('account-a', 'a4')]) await broker.publish(message);

      const stop = new AbortController();
      const receiver = broker.receiver({ endpoint: 'accounts', prefetch: 1, signal: stop.signal });
      const deliveries = receiver[Symbol.asyncIterator]();
      try {
        await retryFirstA(broker, deliveries, 2_000);
        // b1's handler runs on: the b's fill the window, so a's copies stay in the queue, behind a4.
        expect((await nextOf(deliveries)).body).toBe('b1');
        await waitFor(
          'the waiting a messages to move to the tail',
          () => logged.some((m) => m.includes('tail')),
          {
            timeoutMs: 5_000,
          },
        );
        // b2..b4 take the room the a's left: held here (not on the wire) when the connection drops,
        // they come back as an outage, which spends no attempt.
        await waitFor(
          'b1..b4 to be held',
          async () =>
            (await broker.queueDepths('accounts')).reduce((sum, depth) => sum + depth.active, 0) === 4,
          { timeoutMs: 5_000 },
        );
        await dropConnectionOf(broker);

        const seen: string[] = [];
        while (!seen.includes('a4')) {
          const next = await nextOf(deliveries);
          seen.push(`${next.body}#${String(next.facts.attempt)}`.replace('#1', ''));
          await broker.ack(next.id);
        }
        expect(seen.filter((body) => body.startsWith('a'))).toEqual(['a1#2', 'a2', 'a3', 'a4']);
        expect(seen.filter((body) => body.startsWith('b'))).toEqual(b.map((message) => message.body));
      } finally {
        stop.abort();
      }
    }, 15_000);
  });
});
