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
      // Expected of BullMQ on a cluster as a receiver or the broker closes: its worker reports the
      // nodes unreachable once the connections it is closing on are ended, and close() warns when
      // it stops waiting for a worker that takes seconds to close its blocking connection. Any other
      // warning is not expected.
      const logger = expectingLogger(
        (message, fields) =>
          message === 'BullMQ workers still closing; not waiting for them' ||
          (message === 'BullMQ worker error' && fields?.error === 'None of startup nodes is available'),
      );
      const make = (): BullMqBroker =>
        new BullMqBroker({ connection: { cluster: started().cluster.nodes }, prefix, partitions: 4, logger });
      const broker = make();
      return Promise.resolve({
        broker,
        sibling: () => Promise.resolve(make()),
        cleanup: () => broker.close(),
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
