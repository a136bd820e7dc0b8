import { describe, expect, it } from 'vitest';
import { RabbitMqNames } from '../../../src/rabbitmq/rabbitmq-names.js';
import { ORDERED_COMMANDS, registrationOf } from '../../../src/rabbitmq/registration-record.js';

const settings = {
  queueType: 'quorum',
  partitions: 2,
  minDelayBucketMs: 64,
  maxDelayBucketMs: 256,
  registeredAt: 1_700_000_000_000,
} as const;

describe('registrationOf', () => {
  it('lists each subscription with the queues the broker declares for it, as RabbitMQ names them', () => {
    const record = registrationOf(
      new RabbitMqNames('shop'),
      'order.s',
      [
        { handler: 'Place', kind: 'command', types: ['orders.Place', 'orders.Cancel'] },
        { handler: 'Audit.Log', kind: 'event', types: ['orders.Placed'], orderedTypes: ['orders.Placed'] },
        { handler: 'Mail', kind: 'event', types: ['orders.Placed'] },
      ],
      settings,
    );
    expect(record).toEqual({
      endpoint: 'order.s',
      registeredAt: 1_700_000_000_000,
      queueType: 'quorum',
      partitions: 2,
      subscriptions: [
        {
          subscription: { handler: 'Place', kind: 'command', types: ['orders.Place', 'orders.Cancel'] },
          queues: [{ name: 'shop.cmd.orders.Place' }, { name: 'shop.cmd.orders.Cancel' }],
        },
        {
          subscription: {
            handler: 'Audit.Log',
            kind: 'event',
            types: ['orders.Placed'],
            orderedTypes: ['orders.Placed'],
          },
          queues: [
            { name: 'shop.evt.order%2Es.Audit%2ELog' },
            { name: 'shop.evt.order%2Es.Audit%2ELog.p0' },
            { name: 'shop.evt.order%2Es.Audit%2ELog.p1' },
          ],
        },
        {
          subscription: { handler: 'Mail', kind: 'event', types: ['orders.Placed'] },
          queues: [{ name: 'shop.evt.order%2Es.Mail' }],
        },
      ],
      delayQueues: ['shop.delay.q64', 'shop.delay.q128', 'shop.delay.q256'],
    });
  });

  describe('when the broker uses classic queues', () => {
    it('names the classic delay queues, <prefix>.delay.<ms>', () => {
      const record = registrationOf(new RabbitMqNames('shop'), 'orders', [], {
        ...settings,
        queueType: 'classic',
      });
      expect(record.delayQueues).toEqual(['shop.delay.64', 'shop.delay.128', 'shop.delay.256']);
    });
  });

  describe('when command types are ordered', () => {
    it('lists the partition queues they share as one more subscription, (ordered commands)', () => {
      const record = registrationOf(
        new RabbitMqNames('shop'),
        'orders',
        [
          { handler: 'Place', kind: 'command', types: ['orders.Place'], orderedTypes: ['orders.Place'] },
          { handler: 'Cancel', kind: 'command', types: ['orders.Cancel'], orderedTypes: ['orders.Cancel'] },
        ],
        settings,
      );
      expect(record.subscriptions.map(({ subscription, queues }) => [subscription.handler, queues])).toEqual([
        ['Place', [{ name: 'shop.cmd.orders.Place' }]],
        ['Cancel', [{ name: 'shop.cmd.orders.Cancel' }]],
        [ORDERED_COMMANDS, [{ name: 'shop.ordered.orders.p0' }, { name: 'shop.ordered.orders.p1' }]],
      ]);
      expect(record.subscriptions[2]?.subscription).toEqual({
        handler: ORDERED_COMMANDS,
        kind: 'command',
        types: ['orders.Place', 'orders.Cancel'],
        orderedTypes: ['orders.Place', 'orders.Cancel'],
      });
    });
  });
});
