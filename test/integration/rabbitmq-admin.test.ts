import amqplib from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { RABBITMQ_ACTIVE_NOTE, openRabbitMqAdmin } from '../../src/rabbitmq/rabbitmq-admin.js';
import {
  recordRegistration,
  registryQueue,
  type RabbitMqRegistration,
} from '../../src/rabbitmq/rabbitmq-registry.js';
import { deleteRabbitMq, fillQueues, freshRabbitPrefix, rabbitMqUrl } from '../helpers/rabbitmq-queues.js';

let model: amqplib.ChannelModel;
const queues: string[] = [];

beforeAll(async () => {
  model = await amqplib.connect(rabbitMqUrl);
});
afterAll(async () => {
  await model.close();
});
afterEach(async () => {
  await deleteRabbitMq(queues.splice(0));
});

function freshPrefix(): string {
  const prefix = freshRabbitPrefix('admin');
  queues.push(registryQueue(prefix));
  return prefix;
}

/** The registration of endpoint `orders`: a command queue with two delay queues, and an event subscription with 2 partitions. */
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
        queues: [
          { name: q('cmd.orders.PlaceOrder'), delayQueues: [q('delay.1000.cmd'), q('delay.2000.cmd')] },
        ],
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
  };
}

describe('RabbitMqAdmin', () => {
  describe('.topology', () => {
    describe('when nothing registered under the prefix', () => {
      it('is empty, with a note naming the prefix and its registry stream', async () => {
        const prefix = freshPrefix();
        const admin = await openRabbitMqAdmin(rabbitMqUrl, { prefix });
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
      it('shows each queue’s ready messages as waiting, its delay queues’ as delayed, active 0, and the sums', async () => {
        const prefix = freshPrefix();
        const registration = ordersRegistration(prefix, 1_700_000_000_000);
        await recordRegistration(model, prefix, registration);
        await fillQueues({
          [`${prefix}.cmd.orders.PlaceOrder`]: 5,
          [`${prefix}.delay.1000.cmd`]: 2,
          // delay.2000.cmd was never declared: it counts 0.
          [`${prefix}.evt.orders.Audit`]: 3,
          [`${prefix}.evt.orders.Audit.p1`]: 4,
        });
        const admin = await openRabbitMqAdmin(rabbitMqUrl, { prefix });
        try {
          const topology = await admin.topology();
          expect(topology.unreadable).toEqual([]);
          expect(topology.note).toContain(RABBITMQ_ACTIVE_NOTE);
          expect(topology.endpoints).toEqual([
            {
              endpoint: 'orders',
              registeredAt: 1_700_000_000_000,
              subscriptions: [
                {
                  subscription: registration.subscriptions[0]?.subscription,
                  queues: [{ queue: `${prefix}.cmd.orders.PlaceOrder`, waiting: 5, active: 0, delayed: 2 }],
                  total: { queue: `${prefix}.cmd.orders.PlaceOrder`, waiting: 5, active: 0, delayed: 2 },
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
        const admin = await openRabbitMqAdmin(rabbitMqUrl, { prefix });
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

  describe('.close', () => {
    it('closes the admin: a later call throws admin-closed', async () => {
      const admin = await openRabbitMqAdmin(rabbitMqUrl, { prefix: freshPrefix() });
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
      expect((error as Error).message).toContain('RabbitMQ could not be reached at amqp://***@127.0.0.1:1');
      expect((error as Error).message).toContain('--rabbitmq-url');
      expect((error as Error).message).not.toContain('secret');
    });
  });
});
