import { describe, expect, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { InMemoryDeliveryLedger } from '../../src/broker/in-memory-delivery-ledger.js';
import { silentLogger } from '../../src/logging/logger.js';
import { dropConnectionOf } from '../../src/rabbitmq/rabbitmq-broker.js';
import { deliveriesWithin, rabbitScene } from '../helpers/rabbitmq-scene.js';

const { brokerWith, brokerBeside, onChannel, sendRaw } = rabbitScene({ partitions: 4 });

describe('RabbitMqBroker (review)', () => {
  describe('with a ledger, a message whose publish token header the ledger refuses', () => {
    it('is handed out (without asking the ledger) instead of holding the receiver up', async () => {
      const broker = brokerWith({ ledger: new InMemoryDeliveryLedger() });
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Raw'] }]);
        const queue = `${broker.prefix}.cmd.orders.Raw`;
        await sendRaw(queue, '{"bad":"token"}', {
          messageId: 'bad-token',
          headers: { 'x-harrier-token': 'not a token!' },
        });
        await sendRaw(queue, '{"empty":"id"}', {
          headers: { 'x-harrier-id': '', 'x-harrier-token': 'abc' },
        });
        await sendRaw(queue, '{"fine":true}', { messageId: 'fine' });

        const taken = await deliveriesWithin(broker, 'orders', 8_000, 3);

        expect(taken.map((delivery) => delivery.body)).toEqual([
          '{"bad":"token"}',
          '{"empty":"id"}',
          '{"fine":true}',
        ]);
      } finally {
        await broker.close();
      }
    }, 20_000);
  });

  describe('.close with unordered messages taken and not handed out', () => {
    for (const how of ['right after its receiver is aborted', 'alone'] as const) {
      it(`gives them back uncounted when called ${how} (as bus.stop does)`, async () => {
        const broker = brokerWith();
        const { prefix } = broker;
        const controller = new AbortController();
        await broker.register('orders', [
          { handler: 'commands', kind: 'command', types: ['orders.A', 'orders.B'] },
        ]);
        await broker.publish({ id: 'a-1', kind: 'command', type: 'orders.A', body: '{"a":1}' });
        await broker.publish({ id: 'b-1', kind: 'command', type: 'orders.B', body: '{"b":1}' });
        // Each queue's consumer takes one; one is handed out, the other waits in the receiver.
        const receiver = broker.receiver({ endpoint: 'orders', prefetch: 1, signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const out = (await iterator.next()).value as Delivery;
        await broker.ack(out.id);
        const counts = (): Promise<number> =>
          onChannel(async (channel) => {
            const a = await channel.checkQueue(`${prefix}.cmd.orders.A`);
            const b = await channel.checkQueue(`${prefix}.cmd.orders.B`);
            return a.messageCount + b.messageCount;
          });
        await expect.poll(counts).toBe(0);

        if (how === 'right after its receiver is aborted') controller.abort();
        await broker.close();

        const next = brokerBeside(broker);
        try {
          await next.register('orders', [
            { handler: 'commands', kind: 'command', types: ['orders.A', 'orders.B'] },
          ]);
          const [again] = await deliveriesWithin(next, 'orders', 8_000, 1);
          expect(again?.facts.messageId).not.toBe(out.facts.messageId);
          expect(again?.facts).toMatchObject({ attempt: 1, unsettledEnds: 0 });
        } finally {
          await next.close();
        }
      }, 20_000);
    }
  });

  describe('when its connection drops with deliveries out (an outage, not a crash)', () => {
    it('hands the message out again without counting an unsettled end', async () => {
      const broker = brokerWith();
      const controller = new AbortController();
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
        const receiver = broker.receiver({ endpoint: 'orders', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        await broker.publish({ id: 'pay-1', kind: 'command', type: 'orders.Pay', body: '{}' });
        const held = (await iterator.next()).value as Delivery;

        await dropConnectionOf(broker);

        const again = (await iterator.next()).value as Delivery;
        expect(again.facts).toMatchObject({ messageId: 'pay-1', attempt: 1, unsettledEnds: 0 });
        expect(held.facts.attempt).toBe(1);
        await broker.ack(again.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    }, 20_000);

    it('keeps the failed attempts of an ordered message waiting here for its retry', async () => {
      const broker = brokerWith();
      const controller = new AbortController();
      try {
        await broker.register('orders', [
          { handler: 'commands', kind: 'command', types: ['orders.Ship'], orderedTypes: ['orders.Ship'] },
        ]);
        const receiver = broker.receiver({ endpoint: 'orders', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        await broker.publish({
          id: 'ship-1',
          kind: 'command',
          type: 'orders.Ship',
          body: '{}',
          ordered: true,
          partitionKey: 'k',
        });
        const first = (await iterator.next()).value as Delivery;
        await broker.nack(first.id, {
          retryAt: Date.now() + 1_500,
          error: { name: 'Error', message: 'boom' },
        });

        await dropConnectionOf(broker);

        const again = (await iterator.next()).value as Delivery;
        expect(again.facts).toMatchObject({ messageId: 'ship-1', attempt: 2, unsettledEnds: 0 });
        expect(again.facts.history.map((record) => record.error.message)).toEqual(['boom']);
        await broker.ack(again.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    }, 20_000);
  });
});

describe('MessageBus on RabbitMqBroker (review)', () => {
  describe('when foreign bytes without Harrier headers sit in an ordered partition queue and a command queue', () => {
    it('dead-letters each as malformed and goes on handling', async () => {
      const { createBus, defineCommand, CommandHandler } = await import('../../src/index.js');
      const { z } = await import('zod');
      const { allDeadLetters } = await import('../helpers/dead-letters.js');
      const Post = defineCommand('rv.Post', {
        schema: z.object({ account: z.string() }),
        partitionKey: 'account',
        ordered: true,
      });
      const Charge = defineCommand('rv.Charge', { schema: z.object({ id: z.string() }) });
      const handled: string[] = [];
      @CommandHandler(Post)
      class PostHandler {
        handle(payload: { account: string }): void {
          handled.push(`post:${payload.account}`);
        }
      }
      @CommandHandler(Charge)
      class ChargeHandler {
        handle(payload: { id: string }): void {
          handled.push(`charge:${payload.id}`);
        }
      }
      const broker = brokerWith({ partitions: 1 });
      const { prefix } = broker;
      const bus = createBus({
        broker,
        logger: silentLogger,
        endpoint: 'ledger',
        handlers: [PostHandler, ChargeHandler],
      });
      try {
        await bus.start();
        await sendRaw(`${prefix}.ordered.ledger.p0`, 'not json', { messageId: 'foreign-1' });
        await sendRaw(`${prefix}.cmd.rv.Charge`, '{"half":', {});
        await bus.send(Post, { account: 'a' });
        await bus.send(Charge, { id: 'c' });

        await expect
          .poll(
            async () => (await allDeadLetters(bus.deadLetters, 'ledger')).map((record) => record.reason),
            {
              timeout: 10_000,
            },
          )
          .toEqual(['malformed', 'malformed']);
        await expect.poll(() => [...handled].sort(), { timeout: 10_000 }).toEqual(['charge:c', 'post:a']);
      } finally {
        await bus.stop({ gracePeriodMs: 200 });
      }
    }, 30_000);
  });
});

describe('RabbitMqBroker.publish (review)', () => {
  describe('with headers amqplib cannot encode (a partition key past 64 KiB)', () => {
    it('rejects at once with publish-failed naming the limit, not as an outage after publishTimeoutMs', async () => {
      const broker = brokerWith({ publishTimeoutMs: 5_000 });
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Big'] }]);
        const started = Date.now();

        const error = await broker
          .publish({
            id: 'big-1',
            kind: 'command',
            type: 'orders.Big',
            body: '{}',
            partitionKey: 'k'.repeat(70_000),
          })
          .catch((e: unknown) => e);

        expect(error).toMatchObject({ code: 'publish-failed' });
        expect((error as Error).message).toContain('64 KiB');
        expect(Date.now() - started).toBeLessThan(2_000);
        await broker.publish({ id: 'small-1', kind: 'command', type: 'orders.Big', body: '{}' });
      } finally {
        await broker.close();
      }
    }, 20_000);
  });
});
