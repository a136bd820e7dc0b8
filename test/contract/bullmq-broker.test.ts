import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import { BullMqBroker } from '../../src/redis/index.js';
import { describeMessageBrokerConformance } from '../../src/testing/conformance.js';
import { expectingLogger } from '../helpers/expected-warnings.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

describeMessageBrokerConformance('BullMqBroker', async () => {
  const prefix = `{hrt-${randomUUID().slice(0, 8)}}`;
  const abandoned = new Set<string>();
  // `abandon` takes a job's lock away while its worker holds the job: the worker's next renewal
  // fails, and the broker warns of it. That warning is expected of an abandoned job, and of no other.
  const logger = expectingLogger(
    (message, fields) =>
      message === 'BullMQ worker error' &&
      [...abandoned].some((id) => fields?.error === `could not renew lock for job ${id}`),
  );
  // Short stalled checks and renewals: a job whose lock is gone (see `abandon`) is back in its queue,
  // and its old holder has let go of it, within a few hundred ms.
  const broker = new BullMqBroker({
    connection: redisUrl,
    prefix,
    partitions: 4,
    stalledIntervalMs: 200,
    lockRenewMs: 250,
    logger,
  });
  return {
    broker,
    // A second process on the same Redis and prefix.
    sibling: () => Promise.resolve(new BullMqBroker({ connection: redisUrl, prefix, partitions: 4, logger })),
    cleanup: async () => {
      await broker.close();
      const client = new Redis(redisUrl);
      await deleteKeys(client, prefix);
      client.disconnect();
    },
    // The job's lock deleted, as a lease that ran out: the next stalled check puts the job back.
    abandon: async (delivery) => {
      const client = new Redis(redisUrl);
      try {
        const { queue, messageId } = delivery.facts;
        abandoned.add(String(messageId));
        await client.del(`${prefix}:${String(queue)}:${String(messageId)}:lock`);
      } finally {
        client.disconnect();
      }
    },
  };
});
