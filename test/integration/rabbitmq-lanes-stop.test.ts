/**
 * A RabbitMqBroker closing while an ordered key's waiting messages move to the tail of their
 * partition queue, against real RabbitMQ: its receiver waits for the move and the copies to come
 * back (up to 5 s) before its channel closes, so the next process delivers the key in order; copies
 * that never come back (the queue was purged) are no longer awaited after `2 × holdLimitMs`.
 */
import amqplib from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger, type Logger } from '../../src/logging/logger.js';
import { RabbitMqBroker } from '../../src/rabbitmq/rabbitmq-broker.js';
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

describe('RabbitMqBroker partition queues', () => {
  describe('when the broker closes just as a key moves to the tail, with more of it queued ahead of its copies', () => {
    it('closes once the copies are back, so the next process delivers the key in order', async () => {
      const prefix = `${filePrefix}-stop-move`;
      let closing: Promise<void> | undefined;
      const toClose: { broker?: RabbitMqBroker } = {};
      const logger: Logger = {
        ...silentLogger,
        debug: (message) => {
          // The originals are acked, their copies are on their way back: the broker closes now.
          if (message.includes('tail') && toClose.broker !== undefined) closing ??= toClose.broker.close();
        },
      };
      const first = new RabbitMqBroker({
        connection: url,
        prefix,
        partitions: 1,
        partitionPrefetch: 4,
        holdLimitMs: 1_000,
        logger,
      });
      brokers.push(first);
      toClose.broker = first;
      const endpoints = [
        { handler: 'commands', kind: 'command' as const, types: [POST], orderedTypes: [POST] },
      ];
      await first.register('accounts', endpoints);
      // The window takes a1..a3 and b1; a4 waits in the queue, ahead of where a's copies go.
      const messages = ['a1', 'a2', 'a3', 'b1', 'a4'].map((body) => entry(`account-${body[0]}`, body));
      for (const message of messages) await first.publish(message);

      const deliveries = first.receiver({ endpoint: 'accounts', prefetch: 1 })[Symbol.asyncIterator]();
      const a1 = await nextOf(deliveries);
      expect(a1.body).toBe('a1');
      // a1 waits for its retry holding a2 and a3: held past holdLimitMs, they move to the tail.
      await first.nack(a1.id, {
        retryAt: Date.now() + 1_500,
        error: { name: 'Error', message: 'try later' },
      });
      // b1's handler runs on while the broker closes; its ack leaves room for the last copy.
      const b1 = await nextOf(deliveries);
      expect(b1.body).toBe('b1');
      await waitFor('the move to the tail', () => closing !== undefined, { timeoutMs: 5_000 });
      await first.ack(b1.id);
      await closing;

      const next = new RabbitMqBroker({ connection: url, prefix, partitions: 1, logger: silentLogger });
      brokers.push(next);
      await next.register('accounts', endpoints);
      const stop = new AbortController();
      const receiver = next.receiver({ endpoint: 'accounts', prefetch: 1, signal: stop.signal });
      const again = receiver[Symbol.asyncIterator]();
      try {
        const seen: string[] = [];
        while (seen.length < 4) {
          const delivery = await nextOf(again);
          seen.push(delivery.body);
          await next.ack(delivery.id);
        }
        expect(seen).toEqual(['a1', 'a2', 'a3', 'a4']);
      } finally {
        stop.abort();
      }
    }, 20_000);
  });
  describe('when the copies of a key moved to the tail are purged from the queue', () => {
    it('stops awaiting them after twice holdLimitMs, so closing does not wait for them', async () => {
      const prefix = `${filePrefix}-purged`;
      let movedAt: number | undefined;
      const logger: Logger = {
        ...silentLogger,
        debug: (message) => {
          if (message.includes('tail')) movedAt ??= Date.now();
        },
      };
      const broker = new RabbitMqBroker({
        connection: url,
        prefix,
        partitions: 1,
        partitionPrefetch: 2,
        holdLimitMs: 1_000,
        logger,
      });
      brokers.push(broker);
      const endpoints = [
        { handler: 'commands', kind: 'command' as const, types: [POST], orderedTypes: [POST] },
      ];
      await broker.register('accounts', endpoints);
      // The window takes a1 and a2; b1 waits in the queue, ahead of where a's copies go.
      for (const body of ['a1', 'a2', 'b1']) await broker.publish(entry(`account-${body[0]}`, body));

      const deliveries = broker.receiver({ endpoint: 'accounts', prefetch: 2 })[Symbol.asyncIterator]();
      const a1 = await nextOf(deliveries);
      expect(a1.body).toBe('a1');
      await broker.nack(a1.id, {
        retryAt: Date.now() + 1_500,
        error: { name: 'Error', message: 'try later' },
      });
      await waitFor('a1 and a2 to move to the tail', () => movedAt !== undefined, { timeoutMs: 5_000 });
      // b1 (kept out; two may be out) and a1's copy fill the window: a2's copy stays in the queue, and is purged.
      const b1 = await nextOf(deliveries);
      expect(b1.body).toBe('b1');
      const queue = `${prefix}.ordered.accounts.p0`;
      const admin = await amqplib.connect(url);
      try {
        const channel = await admin.createChannel();
        await waitFor(
          'a2 to be the one message queued',
          async () => (await channel.checkQueue(queue)).messageCount === 1,
          {
            timeoutMs: 5_000,
          },
        );
        expect((await channel.purgeQueue(queue)).messageCount).toBe(1);
      } finally {
        await admin.close();
      }
      const a1Again = await nextOf(deliveries);
      expect(a1Again.body).toBe('a1');
      await broker.ack(a1Again.id);
      // Nothing to observe: the receiver forgets the copy on its own clock (2 × holdLimitMs after
      // it was sent, checked every holdLimitMs / 4).
      const forgotten = (movedAt ?? Date.now()) + 2_400 - Date.now();
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, forgotten)));
      const started = Date.now();
      await broker.close();
      expect(Date.now() - started).toBeLessThan(2_500);
    }, 20_000);
  });
});
