import amqplib, { type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Delivery, MessageBroker, OutgoingMessage } from '../../src/broker/message-broker.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { silentLogger } from '../../src/logging/logger.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { partitionOf } from '../../src/messages/partition.js';
import {
  dropConnectionOf,
  RabbitMqBroker,
  type RabbitMqBrokerOptions,
} from '../../src/rabbitmq/rabbitmq-broker.js';
import { deleteRabbitMqPrefix, freshRabbitMqPrefix, rabbitMqUrl } from '../helpers/rabbitmq.js';

const filePrefix = freshRabbitMqPrefix();
let made = 0;
let admin: ChannelModel;

beforeAll(async () => {
  admin = await amqplib.connect(rabbitMqUrl);
});

afterAll(async () => {
  await admin.close();
  await deleteRabbitMqPrefix(filePrefix);
}, 60_000);

/** A broker with a prefix of its own, closed by `use`'s caller. */
function brokerWith(options: Partial<RabbitMqBrokerOptions> = {}): RabbitMqBroker {
  return new RabbitMqBroker({
    connection: rabbitMqUrl,
    prefix: `${filePrefix}-${String(++made)}`,
    partitions: 4,
    logger: silentLogger,
    ...options,
  });
}

/** Runs `check` on a channel of its own (a failed check closes its channel). */
async function onChannel<T>(check: (channel: amqplib.Channel) => Promise<T>): Promise<T> {
  const channel = await admin.createChannel();
  channel.on('error', () => undefined);
  try {
    return await check(channel);
  } finally {
    await channel.close().catch(() => undefined);
  }
}

/** The ready messages in `queue`, or 'missing'. */
function readyIn(queue: string): Promise<number | 'missing'> {
  return onChannel(async (channel) => (await channel.checkQueue(queue)).messageCount).catch(
    () => 'missing' as const,
  );
}

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

function message(
  kind: 'command' | 'event',
  type: string,
  extra: Partial<OutgoingMessage> = {},
): OutgoingMessage {
  return { id: uuidv7(), kind, type, body: `{"type":"${type}"}`, ...extra };
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
      const second = new RabbitMqBroker({
        connection: rabbitMqUrl,
        prefix: first.prefix,
        partitions: 4,
        logger: silentLogger,
      });
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

  describe('constructor', () => {
    it.each([
      [{}, 'needs a connection'],
      [{ connection: rabbitMqUrl, prefix: 'a.b' }, 'prefix'],
      [{ connection: rabbitMqUrl, queueType: 'stream' }, 'queueType'],
      [{ connection: rabbitMqUrl, partitions: 0 }, 'partitions'],
      [{ connection: rabbitMqUrl, publishTimeoutMs: 0 }, 'publishTimeoutMs'],
      [{ connection: rabbitMqUrl, maxDelayBucketMs: 1000 }, 'maxDelayBucketMs'],
      [{ connection: rabbitMqUrl, heartbeatSeconds: -1 }, 'heartbeatSeconds'],
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
