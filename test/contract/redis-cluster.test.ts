/**
 * The MessageBroker, DeadLetterStore, EventLog, CheckpointStore and SagaStore conformance suites against a real
 * Redis Cluster of three nodes started for this file. Every key of Harrier's Redis classes carries
 * the prefix's hash tag, so their multi-key scripts and pipelines stay in one slot. Each test takes a
 * fresh prefix, so the tests' keys land on different nodes (and clients follow MOVED replies).
 */
import { randomUUID } from 'node:crypto';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import {
  BullMqBroker,
  RedisCheckpointStore,
  RedisDeadLetterStore,
  RedisEventLog,
  RedisSagaStore,
} from '../../src/redis/index.js';
import {
  describeCheckpointStoreConformance,
  describeDeadLetterStoreConformance,
  describeEventLogConformance,
  describeMessageBrokerConformance,
  describeSagaStoreConformance,
} from '../../src/testing/conformance.js';
import { expectingLogger } from '../helpers/expected-warnings.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { sideBySide } from '../helpers/side-by-side.js';

let cluster: RedisCluster | undefined;
/** A client of the cluster given to stores (a store must leave a client it was given open). */
let shared: Cluster | undefined;

beforeAll(async () => {
  cluster = await RedisCluster.start();
  shared = new Cluster(cluster.nodes);
}, 60_000);

afterAll(async () => {
  shared?.disconnect();
  await cluster?.destroy();
});

function started(): { cluster: RedisCluster; shared: Cluster } {
  if (cluster === undefined || shared === undefined) throw new Error('The Redis Cluster did not start');
  return { cluster, shared };
}

const freshPrefix = (): string => `{hrc-${randomUUID().slice(0, 8)}}`;

// The suites wait on timers and the cluster far more than they use the CPU, each on prefixes of its own.
sideBySide('Redis Cluster', {
  MessageBroker: () => {
    describeMessageBrokerConformance('BullMqBroker on Redis Cluster', () => {
      const prefix = freshPrefix();
      let closed = false;
      // On a cluster BullMQ can take many seconds to close a worker's blocking connection: close() warns
      // that it stops waiting for it, and once the file's cluster is gone, that worker, still closing,
      // reports the nodes unreachable. Both are expected here; any other warning is not.
      const logger = expectingLogger(
        (message) =>
          message === 'BullMQ workers still closing; not waiting for them' ||
          (closed && message === 'BullMQ worker error'),
      );
      const make = (): BullMqBroker =>
        new BullMqBroker({ connection: { cluster: started().cluster.nodes }, prefix, partitions: 4, logger });
      const broker = make();
      return Promise.resolve({
        broker,
        sibling: () => Promise.resolve(make()),
        cleanup: async () => {
          await broker.close();
          closed = true;
        },
      });
    });
  },
  DeadLetterStore: () => {
    describeDeadLetterStoreConformance('RedisDeadLetterStore on Redis Cluster (given a Cluster client)', () =>
      Promise.resolve({
        store: new RedisDeadLetterStore({ connection: started().shared, prefix: freshPrefix() }),
      }),
    );
  },
  EventLog: () => {
    describeEventLogConformance('RedisEventLog on Redis Cluster (given a Cluster client)', (topics) => {
      const prefix = freshPrefix();
      const connection = started().shared;
      return Promise.resolve({
        log: new RedisEventLog({ connection, topics, prefix }),
        reopen: () => Promise.resolve(new RedisEventLog({ connection, topics, prefix })),
      });
    });
  },
  CheckpointStore: () => {
    describeCheckpointStoreConformance('RedisCheckpointStore on Redis Cluster (given a Cluster client)', () =>
      Promise.resolve({
        store: new RedisCheckpointStore({ connection: started().shared, prefix: freshPrefix() }),
      }),
    );
  },
  SagaStore: () => {
    describeSagaStoreConformance(
      'RedisSagaStore on Redis Cluster (given a Cluster client)',
      ({ completedRetentionMs }) =>
        Promise.resolve({
          store: new RedisSagaStore({
            connection: started().shared,
            prefix: freshPrefix(),
            ...(completedRetentionMs === undefined ? {} : { completedRetentionMs }),
          }),
        }),
    );
  },
});
