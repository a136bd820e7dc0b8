import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { Delivery, MessageBroker } from '../../src/broker/message-broker.js';
import type { DeliveryLedger } from '../../src/broker/delivery-ledger.js';
import { InMemoryDeliveryLedger } from '../../src/broker/in-memory-delivery-ledger.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import type { Logger } from '../../src/logging/logger.js';
import { silentLogger } from '../../src/logging/logger.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { partitionOf } from '../../src/messages/partition.js';
import {
  dropChannelOf,
  dropConnectionOf,
  RabbitMqBroker,
  type RabbitMqBrokerOptions,
} from '../../src/rabbitmq/rabbitmq-broker.js';
import { message, rabbitScene } from '../helpers/rabbitmq-scene.js';

const scene = rabbitScene({ partitions: 4 });
const { brokerWith, brokerBeside, filePrefix, onChannel, readyIn, sendRaw } = scene;

function exchangeExists(exchange: string): Promise<boolean> {
  return onChannel((channel) => channel.checkExchange(exchange)).then(
    () => true,
    () => false,
  );
}

/** Whether `queue` is a quorum queue: declaring it classic is refused (406 PRECONDITION_FAILED). */
function isQuorum(queue: string): Promise<boolean> {
  return onChannel((channel) =>
    channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'classic' } }),
  ).then(
    () => false,
    () => true,
  );
}

/** The first delivery within `ms`, or undefined. */
async function firstWithin(
  broker: MessageBroker,
  endpoint: string,
  ms: number,
): Promise<Delivery | undefined> {
  const signal = AbortSignal.timeout(ms);
  for await (const delivery of broker.receiver({ endpoint, signal })) return delivery;
  return undefined;
}

/**
 * Registers endpoint `orders` (command orders.Pay) on `broker`, publishes one, takes it in a receiver
 * and drops the connection: the receiver's iterator and the copy it hands out again.
 */
async function takenThroughAnOutage(
  broker: RabbitMqBroker,
  signal: AbortSignal,
): Promise<{ iterator: AsyncIterator<Delivery>; back: Delivery }> {
  await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
  await broker.publish(message('command', 'orders.Pay'));
  const receiver = broker.receiver({ endpoint: 'orders', signal });
  const iterator = receiver[Symbol.asyncIterator]();
  await iterator.next();
  await dropConnectionOf(broker);
  const back = (await iterator.next()).value as Delivery;
  return { iterator, back };
}

/** A ledger that calls `ledger` for everything (to override some calls of). */
function passThrough(ledger: DeliveryLedger): DeliveryLedger {
  return {
    admit: (copy, windowMs) => ledger.admit(copy, windowMs),
    settle: (copy, settlement, windowMs) => ledger.settle(copy, settlement, windowMs),
    replace: (copy, windowMs) => ledger.replace(copy, windowMs),
    scheduled: (id, token, queues, at) => ledger.scheduled(id, token, queues, at),
    cancel: (id) => ledger.cancel(id),
    lost: (copies, windowMs) => ledger.lost(copies, windowMs),
    takeLoss: (copy) => ledger.takeLoss(copy),
    close: () => ledger.close(),
  };
}

async function firstOf(broker: MessageBroker, endpoint: string, signal: AbortSignal): Promise<Delivery> {
  for await (const delivery of broker.receiver({ endpoint, signal })) return delivery;
  throw new Error('the receiver ended');
}

describe('RabbitMqBroker', () => {
  describe('.register', () => {
    it('declares quorum queues, an exchange per command type, and routes ordered keys to partition queues', async () => {
      const broker = brokerWith();
      try {
        const p = broker.prefix;
        await broker.register('orders', [
          {
            handler: 'commands',
            kind: 'command',
            types: ['orders.PlaceOrder', 'orders.Post'],
            orderedTypes: ['orders.Post'],
          },
          {
            handler: 'audit',
            kind: 'event',
            types: ['orders.Placed', 'orders.Moved'],
            orderedTypes: ['orders.Moved'],
          },
        ]);

        expect(await exchangeExists(`${p}.cmd.orders.PlaceOrder`)).toBe(true);
        expect(await exchangeExists(`${p}.cmd.orders.Post`)).toBe(true);
        for (const queue of [
          `${p}.cmd.orders.PlaceOrder`,
          `${p}.ordered.orders.p3`,
          `${p}.evt.orders.audit`,
          `${p}.evt.orders.audit.p0`,
        ])
          expect(await isQuorum(queue)).toBe(true);

        await broker.publish(message('command', 'orders.PlaceOrder'));
        await broker.publish(message('command', 'orders.Post', { ordered: true, partitionKey: 'account-1' }));
        await broker.publish(message('event', 'orders.Placed'));
        await broker.publish(message('event', 'orders.Moved', { ordered: true, partitionKey: 'account-1' }));

        // Confirmed: each is in its queue by the time publish resolved.
        const partition = partitionOf('account-1', 4);
        expect(await readyIn(`${p}.cmd.orders.PlaceOrder`)).toBe(1);
        expect(await readyIn(`${p}.ordered.orders.p${partition}`)).toBe(1);
        expect(await readyIn(`${p}.cmd.orders.Post`)).toBe(0);
        expect(await readyIn(`${p}.evt.orders.audit`)).toBe(1);
        expect(await readyIn(`${p}.evt.orders.audit.p${partition}`)).toBe(1);
      } finally {
        await broker.close();
      }
    });

    it('removes the route of a command type the endpoint no longer lists, and keeps its queue and messages', async () => {
      const broker = brokerWith();
      try {
        const p = broker.prefix;
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Ship'] }]);
        await broker.publish(message('command', 'orders.Ship'));

        await broker.register('orders', []);

        expect(await exchangeExists(`${p}.cmd.orders.Ship`)).toBe(false);
        expect(await readyIn(`${p}.cmd.orders.Ship`)).toBe(1);
        const error = await broker.publish(message('command', 'orders.Ship')).catch((e: unknown) => e);
        expect(HarrierError.is(error, 'no-route')).toBe(true);
      } finally {
        await broker.close();
      }
    });

    it('deletes a dropped route whose delete the connection lost, before a publish of its type trusts it', async () => {
      // A proxy that cuts the connection instead of passing on the exchange.delete of the route.
      const target = new URL(scene.url());
      const sockets: Socket[] = [];
      let cut: Buffer | undefined;
      const proxy = createServer((client) => {
        const server = connect(Number(target.port || 5672), target.hostname);
        sockets.push(client, server);
        client.on('data', (chunk: Buffer) => {
          if (cut !== undefined && chunk.includes(cut)) {
            cut = undefined;
            client.destroy();
            server.destroy();
          } else server.write(chunk);
        });
        server.pipe(client);
        client.on('error', () => undefined);
        server.on('error', () => undefined);
      });
      await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
      const proxied = new URL(scene.url());
      proxied.hostname = '127.0.0.1';
      proxied.port = String((proxy.address() as AddressInfo).port);
      const warnings: string[] = [];
      const logger: Logger = { ...silentLogger, warn: (text) => warnings.push(text) };
      const broker = brokerWith({ connection: proxied.toString(), logger });
      try {
        const p = broker.prefix;
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pack'] }]);
        const exchange = `${p}.cmd.orders.Pack`;
        // exchange.delete (class 40, method 20), reserved short, then the exchange name.
        cut = Buffer.concat([
          Buffer.from([0, 40, 0, 20, 0, 0, Buffer.byteLength(exchange)]),
          Buffer.from(exchange),
        ]);

        await broker.register('orders', []);

        expect(cut).toBeUndefined();
        expect(warnings.some((text) => text.includes('could not be removed'))).toBe(true);
        const error = await broker.publish(message('command', 'orders.Pack')).catch((e: unknown) => e);
        expect(HarrierError.is(error, 'no-route')).toBe(true);
        expect(await exchangeExists(exchange)).toBe(false);
        expect(await readyIn(exchange)).toBe(0);
      } finally {
        await broker.close();
        for (const socket of sockets) socket.destroy();
        await new Promise((resolve) => proxy.close(resolve));
      }
    });

    it('keeps the route of a type another endpoint took over when the first one drops it', async () => {
      const broker = brokerWith();
      try {
        const p = broker.prefix;
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Bill'] }]);
        await broker.register('billing', [{ handler: 'commands', kind: 'command', types: ['orders.Bill'] }]);

        await broker.register('orders', []);

        expect(await exchangeExists(`${p}.cmd.orders.Bill`)).toBe(true);
        await broker.publish(message('command', 'orders.Bill'));
        expect(await readyIn(`${p}.cmd.orders.Bill`)).toBe(1);
      } finally {
        await broker.close();
      }
    });

    it('undoes the bindings of a registration made by another process', async () => {
      const first = brokerWith();
      const second = brokerBeside(first);
      try {
        const p = first.prefix;
        await first.register('mailer', [{ handler: 'welcome', kind: 'event', types: ['users.Joined'] }]);

        await second.register('mailer', [{ handler: 'welcome', kind: 'event', types: ['users.Left'] }]);

        await second.publish(message('event', 'users.Joined'));
        await second.publish(message('event', 'users.Left'));
        expect(await readyIn(`${p}.evt.mailer.welcome`)).toBe(1);
      } finally {
        await first.close();
        await second.close();
      }
    });
  });

  describe('.publish', () => {
    describe('of an unrouted command with a deliverAt no Date holds', () => {
      it('refuses it with invalid-option, as publishBatch does, before the route', async () => {
        const broker = brokerWith();
        try {
          const bad = message('command', 'jobs.Nowhere', { deliverAt: Number.NaN });
          const single = await broker.publish(bad).catch((e: unknown) => e);
          const batch = await broker.publishBatch([bad]).catch((e: unknown) => e);
          expect(HarrierError.is(batch, 'invalid-option')).toBe(true);
          expect(HarrierError.is(single, 'invalid-option')).toBe(true);
        } finally {
          await broker.close();
        }
      });
    });

    describe('with deliverAt beyond the longest delay queue', () => {
      it('goes round the delay queues and is not delivered before its time', async () => {
        const broker = brokerWith({ maxDelayBucketMs: 256 });
        const controller = new AbortController();
        try {
          await broker.register('scheduler', [
            { handler: 'commands', kind: 'command', types: ['jobs.Remind'] },
          ]);
          const deliverAt = Date.now() + 3_000;
          await broker.publish(message('command', 'jobs.Remind', { deliverAt }));

          const delivery = await firstOf(broker, 'scheduler', controller.signal);

          expect(Date.now()).toBeGreaterThanOrEqual(deliverAt);
          expect(Date.now()).toBeLessThan(deliverAt + 1_500);
          expect(delivery.facts).toMatchObject({ type: 'jobs.Remind', attempt: 1 });
          await broker.ack(delivery.id);
        } finally {
          controller.abort();
          await broker.close();
        }
      });
    });

    describe('with deliverAt of an event with two subscriptions, arriving early and sent round again', () => {
      it('delivers it once per subscription (each delay queue gets only its own messages)', async () => {
        const broker = brokerWith();
        const seen: string[] = [];
        try {
          await broker.register('billing', [
            { handler: 'mail', kind: 'event', types: ['billing.Due'] },
            { handler: 'book', kind: 'event', types: ['billing.Due'] },
          ]);
          // 500 ms: it waits 256, then 128, then 64 ms, and goes round the delay queues of each.
          await broker.publish(message('event', 'billing.Due', { deliverAt: Date.now() + 500 }));

          for await (const delivery of broker.receiver({
            endpoint: 'billing',
            signal: AbortSignal.timeout(2_500),
          })) {
            seen.push(delivery.facts.handler ?? '');
            await broker.ack(delivery.id);
          }
        } finally {
          await broker.close();
        }
        expect(seen.sort()).toEqual(['book', 'mail']);
      });
    });

    describe('when the queue of a command type with a route was deleted (by an operator)', () => {
      it('refuses its commands with no-route, told apart from a routed publish of the same id', async () => {
        const broker = brokerWith();
        try {
          const p = broker.prefix;
          await broker.register('orders', [
            { handler: 'commands', kind: 'command', types: ['orders.Gone', 'orders.Kept'] },
          ]);
          // Both routes found (trusted for a second), then the queue goes.
          await broker.publish(message('command', 'orders.Gone'));
          await broker.publish(message('command', 'orders.Kept'));
          await onChannel((channel) => channel.deleteQueue(`${p}.cmd.orders.Gone`));

          // Two publishes of one id waiting for their confirm at once, in both orders: only the
          // one RabbitMQ returned is refused.
          for (const types of [
            ['orders.Gone', 'orders.Kept'],
            ['orders.Kept', 'orders.Gone'],
          ]) {
            const id = uuidv7();
            const outcomes = await Promise.allSettled(
              types.map((type) => broker.publish(message('command', type, { id }))),
            );
            const refused = outcomes.map((outcome) =>
              outcome.status === 'rejected' && HarrierError.is(outcome.reason, 'no-route')
                ? (outcome.reason as Error).message.includes('"orders.Gone"')
                : outcome.status,
            );
            expect(refused).toEqual(types.map((type) => (type === 'orders.Gone' ? true : 'fulfilled')));
          }
          expect(await readyIn(`${p}.cmd.orders.Kept`)).toBe(3);

          // Without requiring a route: the queue is declared again and keeps it.
          await broker.publish(message('command', 'orders.Gone', { requireRoute: false }));
          expect(await readyIn(`${p}.cmd.orders.Gone`)).toBe(1);
        } finally {
          await broker.close();
        }
      });
    });

    describe('when publisher and consumer disagree on whether a command type is ordered', () => {
      it('delivers an unordered command of an ordered type, and an ordered one of an unordered type', async () => {
        const publisher = brokerWith();
        const consumer = brokerBeside(publisher);
        try {
          await consumer.register('orders', [
            {
              handler: 'commands',
              kind: 'command',
              types: ['orders.Ship', 'orders.Note'],
              orderedTypes: ['orders.Ship'],
            },
          ]);
          // A publisher that thinks Ship unordered (straight into its type's queue) and Note ordered
          // (through the exchanges, lane p<n>).
          await publisher.publish(message('command', 'orders.Ship', { partitionKey: 'o-1' }));
          await publisher.publish(message('command', 'orders.Note', { ordered: true, partitionKey: 'o-1' }));

          const seen: unknown[] = [];
          for await (const delivery of consumer.receiver({
            endpoint: 'orders',
            signal: AbortSignal.timeout(3_000),
          })) {
            seen.push([delivery.facts.type, delivery.facts.queue, delivery.facts.partitionKey]);
            await consumer.ack(delivery.id);
            if (seen.length === 2) break;
          }
          expect(seen.sort()).toEqual([
            ['orders.Note', 'cmd~orders.Note', 'o-1'],
            ['orders.Ship', 'cmd~orders.Ship', 'o-1'],
          ]);
        } finally {
          await consumer.close();
          await publisher.close();
        }
      });
    });

    describe('a message queued by the previous version (delivery facts in headers only)', () => {
      it('is delivered with its id, kind, type, attempt and partition key, also from a partition queue', async () => {
        const broker = brokerWith();
        try {
          const p = broker.prefix;
          await broker.register('orders', [
            { handler: 'commands', kind: 'command', types: ['orders.Post'], orderedTypes: ['orders.Post'] },
          ]);
          const id = uuidv7();
          await onChannel(async (channel) => {
            channel.sendToQueue(`${p}.ordered.orders.p${partitionOf('o-7', 4)}`, Buffer.from('{}'), {
              persistent: true,
              messageId: id,
              headers: {
                'x-harrier-id': id,
                'x-harrier-kind': 'command',
                'x-harrier-type': 'orders.Post',
                'x-harrier-key': 'o-7',
                'x-harrier-ordered': '1',
                'x-harrier-failures': '1',
              },
            });
            // A round trip after the publish: it is in the queue when this answers.
            await channel.checkQueue(`${p}.cmd.orders.Post`);
          });

          const delivery = await firstWithin(broker, 'orders', 3_000);

          expect(delivery?.facts).toMatchObject({
            messageId: id,
            kind: 'command',
            type: 'orders.Post',
            partitionKey: 'o-7',
            attempt: 2,
            queue: 'cmd~orders.Post',
          });
        } finally {
          await broker.close();
        }
      });
    });

    describe('a foreign message with an AMQP type property of its own, in a command type queue', () => {
      it('is delivered as the type of its queue', async () => {
        const broker = brokerWith();
        try {
          const p = broker.prefix;
          await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Ship'] }]);
          await sendRaw(`${p}.cmd.orders.Ship`, '{}', { messageId: uuidv7(), type: 'application/x-legacy' });

          const delivery = await firstWithin(broker, 'orders', 3_000);

          expect(delivery?.facts).toMatchObject({ type: 'orders.Ship', queue: 'cmd~orders.Ship' });
        } finally {
          await broker.close();
        }
      });
    });

    describe('when RabbitMQ stops answering, and the connection drops after the publish timed out', () => {
      it('rejects the publish once with rabbitmq-unavailable, and leaves no rejection unhandled', async () => {
        // A proxy whose answers from RabbitMQ can be held back: confirms stop arriving.
        const target = new URL(scene.url());
        const sockets: Socket[] = [];
        let upstream: Socket | undefined;
        const proxy = createServer((client) => {
          const server = connect(Number(target.port || 5672), target.hostname);
          upstream = server;
          sockets.push(client, server);
          client.pipe(server);
          server.pipe(client);
          client.on('error', () => undefined);
          server.on('error', () => undefined);
        });
        await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
        const proxied = new URL(scene.url());
        proxied.hostname = '127.0.0.1';
        proxied.port = String((proxy.address() as AddressInfo).port);
        const unhandled: unknown[] = [];
        const onUnhandled = (reason: unknown): void => {
          unhandled.push(reason);
        };
        process.on('unhandledRejection', onUnhandled);
        const broker = brokerWith({ connection: proxied.toString(), publishTimeoutMs: 1_000 });
        try {
          await broker.register('orders', [{ handler: 'h', kind: 'event', types: ['orders.Noted'] }]);
          await broker.publish(message('event', 'orders.Noted'));
          upstream?.pause();
          upstream?.unpipe();

          const error = await broker.publish(message('event', 'orders.Noted')).catch((e: unknown) => e);
          expect(HarrierError.is(error, 'rabbitmq-unavailable')).toBe(true);
          expect((error as Error).message).toContain('no publisher confirm');

          // The connection drops now: amqplib fails the publish's confirm callback too.
          for (const socket of sockets) socket.destroy();
          await new Promise((resolve) => setTimeout(resolve, 300));
          expect(unhandled).toEqual([]);
        } finally {
          process.off('unhandledRejection', onUnhandled);
          await broker.close();
          for (const socket of sockets) socket.destroy();
          await new Promise((resolve) => proxy.close(resolve));
        }
      });
    });

    describe('when RabbitMQ cannot be reached', () => {
      it('rejects with rabbitmq-unavailable once publishTimeoutMs has passed', async () => {
        const broker = new RabbitMqBroker({
          connection: 'amqp://guest:guest@127.0.0.1:1',
          prefix: `${filePrefix}-down`,
          publishTimeoutMs: 300,
          logger: silentLogger,
        });
        try {
          const started = Date.now();
          const error = await broker.publish(message('event', 'users.Joined')).catch((e: unknown) => e);
          expect(HarrierError.is(error, 'rabbitmq-unavailable')).toBe(true);
          expect((error as Error).message).toContain('127.0.0.1:1');
          expect(Date.now() - started).toBeLessThan(5_000);
        } finally {
          await broker.close();
        }
      });
    });
  });

  describe('when its connection drops', () => {
    it('reconnects: the receiver goes on and publishes go through', async () => {
      const broker = brokerWith();
      const controller = new AbortController();
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
        const receiver = broker.receiver({ endpoint: 'orders', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        await broker.publish(message('command', 'orders.Pay', { body: 'before' }));
        const before = await iterator.next();
        expect(before.done).toBe(false);
        const held = before.value as Delivery;

        await dropConnectionOf(broker);

        // Its channel went with the connection: RabbitMQ gives the message again, the old id is stale.
        const again = await iterator.next();
        expect((again.value as Delivery).body).toBe('before');
        expect(await broker.ack(held.id).catch((e: unknown) => e)).toMatchObject({ code: 'stale-delivery' });
        await broker.ack((again.value as Delivery).id);
        await broker.publish(message('command', 'orders.Pay', { body: 'after' }));
        const after = await iterator.next();
        expect((after.value as Delivery).body).toBe('after');
        await broker.ack((after.value as Delivery).id);
      } finally {
        controller.abort();
        await broker.close();
      }
    }, 20_000);
  });

  describe('.ack of deliveries taken after an ordered one held for its retry', () => {
    it('acks them without acking the held one, which comes back once its broker closed', async () => {
      const broker = brokerWith();
      const later = brokerWith({ prefix: broker.prefix });
      const controller = new AbortController();
      const specs = [
        {
          handler: 'commands',
          kind: 'command' as const,
          types: ['ledger.Post', 'ledger.Note'],
          orderedTypes: ['ledger.Post'],
        },
      ];
      try {
        await broker.register('ledger', specs);
        const receiver = broker.receiver({ endpoint: 'ledger', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        await broker.publish(
          message('command', 'ledger.Post', { ordered: true, partitionKey: 'a', body: 'a1' }),
        );
        const held = (await iterator.next()).value as Delivery;
        expect(held.body).toBe('a1');
        // Held unacked in the receiver for a minute: the lowest delivery tag of its channel.
        await broker.nack(held.id, { retryAt: Date.now() + 60_000 });

        await broker.publish(message('command', 'ledger.Note', { body: 'n1' }));
        await broker.publish(message('command', 'ledger.Note', { body: 'n2' }));
        const notes = [(await iterator.next()).value as Delivery, (await iterator.next()).value as Delivery];
        expect(notes.map((note) => note.body).sort()).toEqual(['n1', 'n2']);
        await Promise.all(notes.map((note) => broker.ack(note.id)));
        // Closing sends the acks and closes the channel: the held message goes back to its queue.
        await broker.close();

        // Only the held message comes back: a multiple ack of the notes would have taken it too.
        await later.register('ledger', specs);
        const bodies: string[] = [];
        for await (const delivery of later.receiver({
          endpoint: 'ledger',
          signal: AbortSignal.timeout(2_000),
        })) {
          bodies.push(delivery.body);
          await later.ack(delivery.id);
        }
        expect(bodies).toEqual(['a1']);
      } finally {
        controller.abort();
        await broker.close();
        await later.close();
      }
    }, 20_000);
  });

  describe('when its connection drops while a receiver holds messages unsettled', () => {
    it('hands them out again on attempt 1 with no unsettled end: an outage spends no attempt', async () => {
      const broker = brokerWith();
      const controller = new AbortController();
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
        const ids = [0, 1, 2].map(() => uuidv7());
        for (const id of ids) await broker.publish(message('command', 'orders.Pay', { id }));
        const receiver = broker.receiver({ endpoint: 'orders', prefetch: 3, signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const held: Delivery[] = [];
        for (let i = 0; i < 3; i++) held.push((await iterator.next()).value as Delivery);
        expect(held.map((d) => d.facts.attempt)).toEqual([1, 1, 1]);

        await dropConnectionOf(broker);

        const again: Delivery[] = [];
        for (let i = 0; i < 3; i++) again.push((await iterator.next()).value as Delivery);
        expect(again.map((d) => d.facts.messageId).sort()).toEqual([...ids].sort());
        expect(again.map((d) => [d.facts.attempt, d.facts.unsettledEnds])).toEqual([
          [1, 0],
          [1, 0],
          [1, 0],
        ]);
        for (const delivery of again) await broker.ack(delivery.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    }, 30_000);

    it('still counts a crash: a channel another broker dropped holding the message is an unsettled end', async () => {
      const first = brokerWith();
      const second = brokerBeside(first);
      const controller = new AbortController();
      try {
        await first.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
        await second.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
        await first.publish(message('command', 'orders.Pay'));
        const receiver = first.receiver({ endpoint: 'orders', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const taken = (await iterator.next()).value as Delivery;
        // The first broker's process dies holding it.
        controller.abort();
        await dropChannelOf(first, taken.id);

        const again = await firstOf(second, 'orders', AbortSignal.timeout(20_000));
        expect(again.facts.messageId).toBe(taken.facts.messageId);
        expect([again.facts.attempt, again.facts.unsettledEnds]).toEqual([2, 1]);
        await second.ack(again.id);
      } finally {
        controller.abort();
        await first.close();
        await second.close();
      }
    }, 30_000);

    /**
     * Broker A holds a message when its connection drops; broker B, consuming the same queue, takes
     * what RabbitMQ returns (A reconnects a second later). Resolves to what B was handed.
     */
    async function handedToAnother(
      ledger: DeliveryLedger | undefined,
      secondLedger: DeliveryLedger | undefined = ledger,
    ): Promise<Delivery> {
      const first = brokerWith(ledger === undefined ? {} : { ledger });
      const second = brokerBeside(first, secondLedger === undefined ? {} : { ledger: secondLedger });
      const controller = new AbortController();
      try {
        await first.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
        await second.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pay'] }]);
        await first.publish(message('command', 'orders.Pay'));
        const receiver = first.receiver({ endpoint: 'orders', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const held = (await iterator.next()).value as Delivery;
        const fromSecond = firstOf(second, 'orders', controller.signal);
        const queue = `${first.prefix}.cmd.orders.Pay`;
        await expect
          .poll(() => onChannel(async (channel) => (await channel.checkQueue(queue)).consumerCount))
          .toBe(2);

        await dropConnectionOf(first);

        const again = await fromSecond;
        expect(again.facts.messageId).toBe(held.facts.messageId);
        await second.ack(again.id);
        return again;
      } finally {
        controller.abort();
        await first.close();
        await second.close();
      }
    }

    it('with a delivery ledger, hands a message another broker held out on attempt 1: the outage is recorded in the ledger', async () => {
      const again = await handedToAnother(new InMemoryDeliveryLedger());
      expect([again.facts.attempt, again.facts.unsettledEnds]).toEqual([1, 0]);
    }, 30_000);

    it('with a delivery ledger that cannot be reached at the drop, records the loss once it answers', async () => {
      const ledger = new InMemoryDeliveryLedger();
      let refused = 0;
      let recorded: () => void = () => undefined;
      const lossRecorded = new Promise<void>((resolve) => {
        recorded = resolve;
      });
      // The first broker's ledger refuses its first write of the losses; the second broker admits
      // nothing before the loss is recorded (its ledger answers later than the first's retry).
      const first: DeliveryLedger = {
        ...passThrough(ledger),
        lost: async (copies, windowMs) => {
          if (refused++ === 0) throw new HarrierError('redis-unavailable', 'Redis is down (test)');
          const count = await ledger.lost(copies, windowMs);
          recorded();
          return count;
        },
      };
      const second: DeliveryLedger = {
        ...passThrough(ledger),
        admit: async (copy, windowMs) => {
          await lossRecorded;
          return ledger.admit(copy, windowMs);
        },
      };
      const again = await handedToAnother(first, second);
      expect(refused).toBe(2);
      expect([again.facts.attempt, again.facts.unsettledEnds]).toEqual([1, 0]);
    }, 30_000);

    it('with a delivery ledger, leaves the outage out of a returned copy another broker puts back before admitting it (its receiver closing)', async () => {
      const ledger = new InMemoryDeliveryLedger();
      let recorded = 0;
      const first = brokerWith({
        ledger: {
          ...passThrough(ledger),
          lost: async (copies, windowMs) => {
            const count = await ledger.lost(copies, windowMs);
            recorded += count;
            return count;
          },
        },
      });
      // The second broker's first admission waits: the other copy waits in its receiver meanwhile.
      let admitting = 0;
      let release: () => void = () => undefined;
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      const second = brokerBeside(first, {
        ledger: {
          ...passThrough(ledger),
          admit: async (copy, windowMs) => {
            if (admitting++ === 0) await released;
            return ledger.admit(copy, windowMs);
          },
        },
      });
      const third = brokerBeside(first, {
        ledger,
      });
      const controller = new AbortController();
      const secondController = new AbortController();
      const specs = [{ handler: 'commands', kind: 'command' as const, types: ['orders.Pay'] }];
      try {
        await first.register('orders', specs);
        await second.register('orders', specs);
        await third.register('orders', specs);
        const ids = [uuidv7(), uuidv7()];
        for (const id of ids) await first.publish(message('command', 'orders.Pay', { id }));
        const receiver = first.receiver({ endpoint: 'orders', prefetch: 2, signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        await iterator.next();
        await iterator.next();
        const fromSecond = firstOf(second, 'orders', secondController.signal).catch(() => undefined);
        const queue = `${first.prefix}.cmd.orders.Pay`;
        await expect
          .poll(() => onChannel(async (channel) => (await channel.checkQueue(queue)).consumerCount))
          .toBe(2);

        await dropConnectionOf(first);
        await expect.poll(() => recorded).toBe(2);
        await expect.poll(() => admitting).toBe(1);
        await expect.poll(() => readyIn(queue)).toBe(0);
        // The second broker closes (a rolling deploy): the copy waiting there goes back as a copy.
        secondController.abort();
        release();
        await fromSecond;
        await second.close();

        const again: Delivery[] = [];
        for await (const delivery of third.receiver({
          endpoint: 'orders',
          signal: AbortSignal.timeout(10_000),
        })) {
          again.push(delivery);
          await third.ack(delivery.id);
          if (again.length === 2) break;
        }
        expect(again.map((d) => d.facts.messageId).sort()).toEqual([...ids].sort());
        expect(again.map((d) => [d.facts.attempt, d.facts.unsettledEnds])).toEqual([
          [1, 0],
          [1, 0],
        ]);
      } finally {
        controller.abort();
        secondController.abort();
        release();
        await first.close();
        await second.close();
        await third.close();
      }
    }, 30_000);

    it('with a delivery ledger that refuses the losses as invalid, does not ask it again', async () => {
      const ledger = new InMemoryDeliveryLedger();
      let calls = 0;
      const broker = brokerWith({
        ledger: {
          ...passThrough(ledger),
          lost: () => {
            calls++;
            return Promise.reject(new HarrierError('invalid-argument', 'refused (test)'));
          },
        },
      });
      const controller = new AbortController();
      try {
        const { back } = await takenThroughAnOutage(broker, controller.signal);
        await expect.poll(() => calls).toBe(1);
        // A receiver asks a failing ledger again each second: past that, still one call.
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        expect(calls).toBe(1);
        await broker.ack(back.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    }, 30_000);

    it('without a ledger, counts the return of a message another broker held as an unsettled end (the limit docs/rabbitmq.md names)', async () => {
      const again = await handedToAnother(undefined);
      expect([again.facts.attempt, again.facts.unsettledEnds]).toEqual([2, 1]);
    }, 30_000);

    it('still counts a crash after an outage: the same broker, its channel dropped as a dying process does', async () => {
      const broker = brokerWith();
      const controller = new AbortController();
      try {
        const { iterator, back } = await takenThroughAnOutage(broker, controller.signal);
        expect([back.facts.attempt, back.facts.unsettledEnds]).toEqual([1, 0]);

        await dropChannelOf(broker, back.id);

        const crashed = (await iterator.next()).value as Delivery;
        expect(crashed.facts.messageId).toBe(back.facts.messageId);
        expect([crashed.facts.attempt, crashed.facts.unsettledEnds]).toEqual([2, 1]);
        await broker.ack(crashed.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    }, 30_000);
  });

  describe('.receiver when its signal aborts with messages taken and not handed out', () => {
    it('gives an unordered one back uncounted', async () => {
      const broker = brokerWith();
      const first = new AbortController();
      const second = new AbortController();
      try {
        await broker.register('orders', [
          { handler: 'commands', kind: 'command', types: ['orders.A', 'orders.B'] },
        ]);
        await broker.publish(message('command', 'orders.A'));
        await broker.publish(message('command', 'orders.B'));
        // Each queue's consumer takes one; one of them is handed out, the other waits in the receiver.
        const receiver = broker.receiver({ endpoint: 'orders', prefetch: 1, signal: first.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const out = (await iterator.next()).value as Delivery;
        await expect.poll(() => readyIn(`${broker.prefix}.cmd.orders.A`)).toBe(0);
        await expect.poll(() => readyIn(`${broker.prefix}.cmd.orders.B`)).toBe(0);

        first.abort();
        await broker.ack(out.id);

        const again = await firstOf(broker, 'orders', second.signal);
        expect(again.facts.type).not.toBe(out.facts.type);
        expect(again.facts).toMatchObject({ attempt: 1, unsettledEnds: 0 });
        await broker.ack(again.id);
      } finally {
        second.abort();
        await broker.close();
      }
    });

    it('returns an ordered one to its partition queue in order, which a quorum queue counts as an unsettled end', async () => {
      const broker = brokerWith();
      const first = new AbortController();
      const second = new AbortController();
      try {
        await broker.register('ledger', [
          { handler: 'commands', kind: 'command', types: ['ledger.Post'], orderedTypes: ['ledger.Post'] },
        ]);
        for (const body of ['a1', 'a2', 'a3'])
          await broker.publish(message('command', 'ledger.Post', { ordered: true, partitionKey: 'a', body }));
        const receiver = broker.receiver({ endpoint: 'ledger', signal: first.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const out = (await iterator.next()).value as Delivery;
        expect(out.body).toBe('a1');
        await expect.poll(() => readyIn(`${broker.prefix}.ordered.ledger.p${partitionOf('a', 4)}`)).toBe(0);

        first.abort();
        await broker.ack(out.id);

        const bodies: string[] = [];
        for await (const delivery of broker.receiver({ endpoint: 'ledger', signal: second.signal })) {
          bodies.push(delivery.body);
          expect(delivery.facts).toMatchObject({ attempt: 2, unsettledEnds: 1 });
          await broker.ack(delivery.id);
          if (bodies.length === 2) break;
        }
        expect(bodies).toEqual(['a2', 'a3']);
      } finally {
        second.abort();
        await broker.close();
      }
    });
  });

  describe('when a queue is deleted under a running receiver', () => {
    it('declares it again and goes on receiving', async () => {
      const broker = brokerWith();
      const controller = new AbortController();
      try {
        const queue = `${broker.prefix}.cmd.orders.Refund`;
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Refund'] }]);
        const receiver = broker.receiver({ endpoint: 'orders', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const next = iterator.next();
        await expect
          .poll(() => onChannel(async (channel) => (await channel.checkQueue(queue)).consumerCount))
          .toBe(1);

        await onChannel((channel) => channel.deleteQueue(queue));

        await expect
          .poll(
            () =>
              onChannel(async (channel) => (await channel.checkQueue(queue)).consumerCount).catch(() => 0),
            { timeout: 10_000 },
          )
          .toBe(1);
        await broker.publish(message('command', 'orders.Refund', { body: 'refund' }));
        const delivery = (await next).value as Delivery;
        expect(delivery.body).toBe('refund');
        await broker.ack(delivery.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    }, 20_000);
  });

  describe('with queueType classic', () => {
    it('declares classic queues and does not count crashes', async () => {
      const broker = brokerWith({ queueType: 'classic' });
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Cancel'] }]);
        expect(await isQuorum(`${broker.prefix}.cmd.orders.Cancel`)).toBe(false);
        expect(broker.capabilities().crashCounting).toBe(false);
      } finally {
        await broker.close();
      }
    });
  });

  describe('without a ledger', () => {
    it('warns once at construction that publish is not idempotent, naming the ledger option', () => {
      const warnings: string[] = [];
      const logger: Logger = { ...silentLogger, warn: (text) => warnings.push(text) };

      const broker = brokerWith({ logger });

      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(/not idempotent.*may add a copy.*ledger option/);
      expect(broker.capabilities()).toMatchObject({ dedupeWindowMs: 0, cancelScheduled: false });
      return broker.close();
    });

    it('refuses cancel with not-supported naming the ledger option', async () => {
      const broker = brokerWith();
      try {
        const error = await broker.cancel('some-id').catch((e: unknown) => e);
        expect(HarrierError.is(error, 'not-supported')).toBe(true);
        expect((error as Error).message).toContain('ledger option');
      } finally {
        await broker.close();
      }
    });

    it('adds a copy when a message still queued is replayed (RabbitMQ cannot look into a queue)', async () => {
      const broker = brokerWith();
      const controller = new AbortController();
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Ship'] }]);
        const queued = message('command', 'orders.Ship');
        await broker.publish(queued);

        await broker.redeliver({
          endpoint: 'orders',
          handler: 'commands',
          message: queued,
          deadLetterId: 'dl-1',
        });

        const receiver = broker.receiver({ endpoint: 'orders', signal: controller.signal });
        const iterator = receiver[Symbol.asyncIterator]();
        const first = (await iterator.next()).value as Delivery;
        const second = (await iterator.next()).value as Delivery;
        expect([first.facts.replayOf, second.facts.replayOf].sort()).toEqual(['dl-1', undefined]);
        await broker.ack(first.id);
        await broker.ack(second.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    });
  });

  describe('with a ledger', () => {
    it('declares the dedupe window and cancel, and does not warn', () => {
      const warnings: string[] = [];
      const logger: Logger = { ...silentLogger, warn: (text) => warnings.push(text) };

      const broker = brokerWith({ logger, ledger: new InMemoryDeliveryLedger() });
      const windowed = brokerWith({ logger, ledger: new InMemoryDeliveryLedger(), dedupeWindowMs: 60_000 });

      expect(warnings).toEqual([]);
      expect(broker.capabilities()).toMatchObject({ dedupeWindowMs: 86_400_000, cancelScheduled: true });
      expect(windowed.capabilities().dedupeWindowMs).toBe(60_000);
      return Promise.all([broker.close(), windowed.close()]);
    });

    it('delivers a message published without a token (foreign bytes) without asking the ledger', async () => {
      const ledger = new InMemoryDeliveryLedger();
      const broker = brokerWith({ ledger });
      const controller = new AbortController();
      try {
        await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Raw'] }]);
        await onChannel(async (channel) => {
          channel.sendToQueue(`${broker.prefix}.cmd.orders.Raw`, Buffer.from('{"raw":true}'), {
            persistent: true,
            messageId: 'raw-1',
          });
          await channel.checkQueue(`${broker.prefix}.cmd.orders.Raw`);
        });

        const delivery = await firstOf(broker, 'orders', controller.signal);

        expect(delivery).toMatchObject({ body: '{"raw":true}', facts: { messageId: 'raw-1', attempt: 1 } });
        await broker.ack(delivery.id);
      } finally {
        controller.abort();
        await broker.close();
      }
    });

    describe('when the ledger cannot be reached as a copy is taken', () => {
      it('holds the copy uncounted and hands it out with attempt 1 once the ledger answers', async () => {
        const ledger = new InMemoryDeliveryLedger();
        let down = true;
        let refused = 0;
        const flaky: DeliveryLedger = {
          admit: (copy, windowMs) => {
            if (!down) return ledger.admit(copy, windowMs);
            refused++;
            return Promise.reject(new HarrierError('redis-unavailable', 'Redis is down (test)'));
          },
          settle: (copy, settlement, windowMs) => ledger.settle(copy, settlement, windowMs),
          replace: (copy, windowMs) => ledger.replace(copy, windowMs),
          scheduled: (id, token, queues, at) => ledger.scheduled(id, token, queues, at),
          cancel: (id) => ledger.cancel(id),
          lost: (copies, windowMs) => ledger.lost(copies, windowMs),
          takeLoss: (copy) => ledger.takeLoss(copy),
          close: () => ledger.close(),
        };
        const broker = brokerWith({ ledger: flaky });
        const controller = new AbortController();
        try {
          await broker.register('orders', [{ handler: 'commands', kind: 'command', types: ['orders.Pack'] }]);
          const sent = message('command', 'orders.Pack');
          await broker.publish(sent);
          const delivery = firstOf(broker, 'orders', controller.signal);
          await expect.poll(() => refused, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);

          down = false;

          const handed = await delivery;
          expect(handed.facts).toMatchObject({ messageId: sent.id, attempt: 1, unsettledEnds: 0 });
          await broker.ack(handed.id);
          // Settled in the ledger: the same publish made again is a duplicate.
          await broker.publish(sent);
          expect(await firstWithin(broker, 'orders', 1_500)).toBeUndefined();
        } finally {
          controller.abort();
          await broker.close();
        }
      }, 30_000);
    });
  });

  describe('constructor', () => {
    // The constructor does not connect: any URL does.
    const anyUrl = 'amqp://127.0.0.1:5672';
    it.each([
      [{}, 'needs a connection'],
      [{ connection: anyUrl, prefix: 'a.b' }, 'prefix'],
      [{ connection: anyUrl, queueType: 'stream' }, 'queueType'],
      [{ connection: anyUrl, partitions: 0 }, 'partitions'],
      [{ connection: anyUrl, publishTimeoutMs: 0 }, 'publishTimeoutMs'],
      [{ connection: anyUrl, maxDelayBucketMs: 1000 }, 'maxDelayBucketMs'],
      [{ connection: anyUrl, heartbeatSeconds: -1 }, 'heartbeatSeconds'],
      [{ connection: anyUrl, dedupeWindowMs: 0 }, 'dedupeWindowMs'],
      [{ connection: anyUrl, partitionPrefetch: 0 }, 'partitionPrefetch'],
      [{ connection: anyUrl, partitionPrefetch: 65_536 }, 'partitionPrefetch'],
      [{ connection: anyUrl, holdLimitMs: 999 }, 'holdLimitMs'],
    ])('refuses %j with invalid-option naming %s', (options, named) => {
      let error: unknown;
      try {
        new RabbitMqBroker(options as unknown as RabbitMqBrokerOptions);
      } catch (e) {
        error = e;
      }
      expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      expect((error as Error).message).toContain(named);
    });
  });
});
