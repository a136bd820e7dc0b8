import amqplib from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { OutgoingMessage } from '../../src/broker/message-broker.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { silentLogger } from '../../src/logging/logger.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import {
  RABBITMQ_ACTIVE_NOTE,
  dropConnectionOfAdmin,
  openRabbitMqAdmin,
} from '../../src/rabbitmq/rabbitmq-admin.js';
import { RabbitMqBroker } from '../../src/rabbitmq/rabbitmq-broker.js';
import {
  recordRegistration,
  registryQueue,
  type RabbitMqRegistration,
} from '../../src/rabbitmq/rabbitmq-registry.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { deleteRabbitMq, fillQueues, freshBrokerPrefix } from '../helpers/rabbitmq-queues.js';

let url: string;
let model: amqplib.ChannelModel;
const queues: string[] = [];

beforeAll(async () => {
  url = await rabbitmqUrl();
  model = await amqplib.connect(url);
}, 60_000);
afterAll(async () => {
  await model.close();
});
afterEach(async () => {
  await deleteRabbitMq(queues.splice(0));
}, 60_000);

/**
 * A RabbitMqBroker on a prefix of its own; what it declares stays (in the global setup's own server,
 * deleted with it; see test/helpers/rabbitmq.ts).
 */
function freshBroker(): RabbitMqBroker {
  const prefix = freshBrokerPrefix();
  return new RabbitMqBroker({
    connection: url,
    prefix,
    queueType: 'classic',
    partitions: 2,
    logger: silentLogger,
  });
}

function message(
  kind: 'command' | 'event',
  type: string,
  extra: Partial<OutgoingMessage> = {},
): OutgoingMessage {
  return { id: uuidv7(), kind, type, body: `{"type":"${type}"}`, ...extra };
}

function freshPrefix(): string {
  const prefix = freshBrokerPrefix();
  queues.push(registryQueue(prefix));
  return prefix;
}

/** The registration of endpoint `orders`: a command queue, an event subscription with 2 partitions, two delay queues. */
function ordersRegistration(prefix: string, registeredAt: number): RabbitMqRegistration {
  const q = (name: string) => {
    queues.push(`${prefix}.${name}`);
    return `${prefix}.${name}`;
  };
  return {
    endpoint: 'orders',
    registeredAt,
    queueType: 'classic',
    partitions: 2,
    subscriptions: [
      {
        subscription: { handler: 'PlaceOrderHandler', kind: 'command', types: ['orders.PlaceOrder'] },
        queues: [{ name: q('cmd.orders.PlaceOrder') }],
      },
      {
        subscription: {
          handler: 'Audit',
          kind: 'event',
          types: ['orders.OrderPlaced'],
          orderedTypes: ['orders.OrderPlaced'],
        },
        queues: [
          { name: q('evt.orders.Audit') },
          { name: q('evt.orders.Audit.p0') },
          { name: q('evt.orders.Audit.p1') },
        ],
      },
    ],
    delayQueues: [q('delay.1024'), q('delay.2048')],
  };
}

describe('RabbitMqAdmin', () => {
  describe('.topology', () => {
    describe('when nothing registered under the prefix', () => {
      it('is empty, with a note naming the prefix and its registry stream', async () => {
        const prefix = freshPrefix();
        const admin = await openRabbitMqAdmin(url, { prefix });
        try {
          const topology = await admin.topology();
          expect(topology.endpoints).toEqual([]);
          expect(topology.note).toContain(`under prefix "${prefix}"`);
          expect(topology.note).toContain(`"${prefix}.registry" does not exist`);
        } finally {
          await admin.close();
        }
      });
    });

    describe('when messages wait in registered queues with nobody consuming', () => {
      it('shows each queue’s ready messages as waiting, active and delayed 0, the sums, and the delay queues’ messages in the note', async () => {
        const prefix = freshPrefix();
        const registration = ordersRegistration(prefix, 1_700_000_000_000);
        await recordRegistration(model, prefix, registration);
        await fillQueues({
          [`${prefix}.cmd.orders.PlaceOrder`]: 5,
          [`${prefix}.delay.1024`]: 2,
          // delay.2048 was never declared: it counts 0.
          [`${prefix}.evt.orders.Audit`]: 3,
          [`${prefix}.evt.orders.Audit.p1`]: 4,
        });
        const admin = await openRabbitMqAdmin(url, { prefix });
        try {
          const topology = await admin.topology();
          expect(topology.unreadable).toEqual([]);
          expect(topology.note).toContain(RABBITMQ_ACTIVE_NOTE);
          expect(topology.note).toContain(
            `2 messages in the 1 delay queue of the prefix ("${prefix}.delay.*"), waiting for a retry or a scheduled time`,
          );
          expect(topology.endpoints).toEqual([
            {
              endpoint: 'orders',
              registeredAt: 1_700_000_000_000,
              subscriptions: [
                {
                  subscription: registration.subscriptions[0]?.subscription,
                  queues: [{ queue: `${prefix}.cmd.orders.PlaceOrder`, waiting: 5, active: 0, delayed: 0 }],
                  total: { queue: `${prefix}.cmd.orders.PlaceOrder`, waiting: 5, active: 0, delayed: 0 },
                },
                {
                  subscription: registration.subscriptions[1]?.subscription,
                  queues: [
                    { queue: `${prefix}.evt.orders.Audit`, waiting: 3, active: 0, delayed: 0 },
                    { queue: `${prefix}.evt.orders.Audit.p0`, waiting: 0, active: 0, delayed: 0 },
                    { queue: `${prefix}.evt.orders.Audit.p1`, waiting: 4, active: 0, delayed: 0 },
                  ],
                  total: { queue: `${prefix}.evt.orders.Audit`, waiting: 7, active: 0, delayed: 0 },
                },
              ],
            },
          ]);
        } finally {
          await admin.close();
        }
      });
    });

    describe('when an endpoint registered again', () => {
      it('shows its latest registration only, beside the other endpoints', async () => {
        const prefix = freshPrefix();
        await recordRegistration(model, prefix, ordersRegistration(prefix, 1000));
        await recordRegistration(model, prefix, {
          endpoint: 'billing',
          registeredAt: 1500,
          queueType: 'quorum',
          partitions: 0,
          subscriptions: [],
        });
        const admin = await openRabbitMqAdmin(url, { prefix });
        try {
          expect((await admin.topology()).endpoints.map((e) => [e.endpoint, e.registeredAt])).toEqual([
            ['billing', 1500],
            ['orders', 1000],
          ]);
          await recordRegistration(model, prefix, { ...ordersRegistration(prefix, 2000), subscriptions: [] });
          const again = await admin.topology();
          expect(again.endpoints.map((e) => [e.endpoint, e.registeredAt, e.subscriptions.length])).toEqual([
            ['billing', 1500, 0],
            ['orders', 2000, 0],
          ]);
        } finally {
          await admin.close();
        }
      });
    });
  });

  describe('with endpoints registered by a RabbitMqBroker', () => {
    it('shows their queues with the messages published while nobody consumes, and opens a broker of the same settings', async () => {
      const broker = freshBroker();
      try {
        await broker.register('orders', [
          {
            handler: 'PlaceOrderHandler',
            kind: 'command',
            types: ['orders.PlaceOrder', 'orders.CancelOrder'],
            orderedTypes: ['orders.CancelOrder'],
          },
          {
            handler: 'Audit',
            kind: 'event',
            types: ['orders.OrderPlaced'],
            orderedTypes: ['orders.OrderPlaced'],
          },
        ]);
        await broker.register('billing', [{ handler: 'Bill', kind: 'event', types: ['orders.OrderPlaced'] }]);
        const p = broker.prefix;
        for (let i = 0; i < 5; i++) await broker.publish(message('command', 'orders.PlaceOrder'));
        await broker.publish(message('command', 'orders.CancelOrder', { partitionKey: 'k1', ordered: true }));
        for (let i = 0; i < 3; i++) await broker.publish(message('event', 'orders.OrderPlaced'));
        await broker.publish(message('command', 'orders.PlaceOrder', { deliverAt: Date.now() + 60_000 }));

        const admin = await openRabbitMqAdmin(url, { prefix: p });
        try {
          const topology = await admin.topology();
          const rows = topology.endpoints.flatMap(({ endpoint, subscriptions }) =>
            subscriptions.map(({ subscription, queues: depths, total }) => ({
              endpoint,
              handler: subscription.handler,
              queues: depths.map((d) => d.queue),
              waiting: total.waiting,
            })),
          );
          expect(rows).toEqual([
            { endpoint: 'billing', handler: 'Bill', queues: [`${p}.evt.billing.Bill`], waiting: 3 },
            {
              endpoint: 'orders',
              handler: 'PlaceOrderHandler',
              queues: [`${p}.cmd.orders.PlaceOrder`, `${p}.cmd.orders.CancelOrder`],
              waiting: 5,
            },
            {
              endpoint: 'orders',
              handler: 'Audit',
              queues: [`${p}.evt.orders.Audit`, `${p}.evt.orders.Audit.p0`, `${p}.evt.orders.Audit.p1`],
              waiting: 3,
            },
            {
              endpoint: 'orders',
              handler: '(ordered commands)',
              queues: [`${p}.ordered.orders.p0`, `${p}.ordered.orders.p1`],
              waiting: 1,
            },
          ]);
          expect(topology.note).toContain('1 message in the 1 delay queue of the prefix');

          const replays = await admin.broker({ logger: silentLogger });
          expect(replays instanceof RabbitMqBroker ? replays.prefix : replays).toBe(p);
        } finally {
          await admin.close();
        }
      } finally {
        await broker.close();
      }
    }, 60_000);
  });

  describe('.broker', () => {
    it('throws invalid-argument naming --rabbitmq-prefix when no endpoint registered under the prefix', async () => {
      const admin = await openRabbitMqAdmin(url, { prefix: freshPrefix() });
      try {
        const error: unknown = await admin.broker().catch((e: unknown) => e);
        expect(HarrierError.is(error, 'invalid-argument')).toBe(true);
        expect((error as Error).message).toContain('--rabbitmq-prefix');
      } finally {
        await admin.close();
      }
    });
  });

  describe('when its connection dropped', () => {
    it('connects again on the next call, and goes on reading the registry', async () => {
      const prefix = freshPrefix();
      await recordRegistration(model, prefix, ordersRegistration(prefix, 1000));
      const admin = await openRabbitMqAdmin(url, { prefix });
      try {
        expect((await admin.topology()).endpoints.map((e) => e.registeredAt)).toEqual([1000]);
        await dropConnectionOfAdmin(admin);
        await recordRegistration(model, prefix, ordersRegistration(prefix, 2000));
        expect((await admin.topology()).endpoints.map((e) => e.registeredAt)).toEqual([2000]);
      } finally {
        await admin.close();
      }
    });
  });

  describe('.close', () => {
    it('closes the admin: a later call throws admin-closed', async () => {
      const admin = await openRabbitMqAdmin(url, { prefix: freshPrefix() });
      await admin.close();
      await expect(admin.topology()).rejects.toSatisfy((error) => HarrierError.is(error, 'admin-closed'));
    });
  });

  describe('openRabbitMqAdmin', () => {
    it('throws rabbitmq-unavailable naming the fix when RabbitMQ cannot be reached', async () => {
      const error: unknown = await openRabbitMqAdmin('amqp://guest:secret@127.0.0.1:1').catch(
        (e: unknown) => e,
      );
      expect(HarrierError.is(error, 'rabbitmq-unavailable')).toBe(true);
      expect((error as Error).message).toContain(
        'RabbitMQ could not be reached at amqp://guest:***@127.0.0.1:1',
      );
      expect((error as Error).message).toContain('--rabbitmq-url');
      expect((error as Error).message).not.toContain('secret');
    });
  });
});
