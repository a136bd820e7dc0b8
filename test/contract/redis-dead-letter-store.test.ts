import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, inject } from 'vitest';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { describeDeadLetterStoreConformance } from '../../src/testing/dead-letter-store-conformance.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

/** Shared by the fixtures: deletes what each test left behind, and is the client given to a store. */
let shared: Redis;

beforeAll(() => {
  shared = new Redis(redisUrl);
});

afterAll(async () => {
  await shared.quit();
});

/** A hash tag of its own per test, so tests never see each other's records. */
function freshPrefix(): string {
  return `{harrier-test-${randomUUID()}}`;
}

describeDeadLetterStoreConformance('RedisDeadLetterStore (from a URL)', async () => {
  const prefix = freshPrefix();
  return {
    store: new RedisDeadLetterStore({ connection: redisUrl, prefix }),
    cleanup: async () => {
      await deleteKeys(shared, prefix);
    },
  };
});

// Run against a shared client too: a store that quit a client it was given would fail every later test.
describeDeadLetterStoreConformance('RedisDeadLetterStore (given a client)', async () => {
  const prefix = freshPrefix();
  return {
    store: new RedisDeadLetterStore({ connection: shared, prefix }),
    cleanup: async () => {
      await deleteKeys(shared, prefix);
    },
  };
});
