import { Redis } from 'ioredis';
import { describe, expect, inject, it } from 'vitest';
import type { Delivery, OutgoingMessage } from '../../src/broker/message-broker.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { PendingDeliveries } from '../../src/broker/pending-deliveries.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/local-redis.js';

const redisUrl = inject('redisUrl');

const message: OutgoingMessage = {
  id: '0190a5c4-0000-7000-8000-000000000001',
  kind: 'command',
  type: 'review.Reserve',
  body: '{}',
};

describe('BullMqReceiver', () => {
  describe('.return', () => {
    describe('when called after a job reached the receiver, before its pending next() resolved', () => {
      it('ends that next() and gives the job back, so return() completes and another receiver gets it', async () => {
        const prefix = freshPrefix();
        const broker = new BullMqBroker({ connection: redisUrl, prefix, partitions: 1 });
        const add = Object.getOwnPropertyDescriptor(PendingDeliveries.prototype, 'add')?.value as (
          this: PendingDeliveries,
          ...args: Parameters<PendingDeliveries['add']>
        ) => void;
        try {
          await broker.register('e', [{ handler: 'h', kind: 'command', types: [message.type] }]);
          const first = broker.receiver({ endpoint: 'e' })[Symbol.asyncIterator]();
          let returned: Promise<unknown> | undefined;
          // The job's delivery is recorded as pending right before it goes into the inbox: a microtask
          // queued here runs return() after that hand-over and before the pending next() sees it.
          PendingDeliveries.prototype.add = function (this: PendingDeliveries, ...args) {
            add.apply(this, args);
            queueMicrotask(() => {
              returned ??= first.return?.();
            });
          };
          const pending = first.next();
          await broker.publish(message);
          await waitFor('return() after the hand-over', () => returned !== undefined, { timeoutMs: 5_000 });
          PendingDeliveries.prototype.add = add;
          const result = await pending;
          // Settled here if it was handed out anyway, so that the receiver can close and the test ends.
          if (result.done !== true) await broker.nack(result.value.id, { release: true });
          await returned;

          expect(result).toEqual({ done: true, value: undefined });
          const second = broker.receiver({ endpoint: 'e' })[Symbol.asyncIterator]();
          const again = await second.next();
          expect(again.done).toBe(false);
          await broker.ack((again.value as Delivery).id);
          await second.return?.();
        } finally {
          PendingDeliveries.prototype.add = add;
          await broker.close();
          const client = new Redis(redisUrl);
          await deleteKeys(client, prefix);
          client.disconnect();
        }
      });
    });
  });
});
