import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import { BullMqBroker } from '../../src/redis/index.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

describeMessageBrokerConformance('BullMqBroker', async () => {
  const prefix = `{hrt-${randomUUID().slice(0, 8)}}`;
  const broker = new BullMqBroker({ connection: redisUrl, prefix, partitions: 4 });
  return {
    broker,
    // A second process on the same Redis and prefix.
    sibling: () => Promise.resolve(new BullMqBroker({ connection: redisUrl, prefix, partitions: 4 })),
    cleanup: async () => {
      await broker.close();
      const client = new Redis(redisUrl);
      await deleteKeys(client, prefix);
      client.disconnect();
    },
  };
});
