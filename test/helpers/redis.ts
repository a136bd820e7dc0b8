import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';

/**
 * Every key matching `pattern`, following SCAN's cursor until it comes back to 0: one SCAN call
 * looks at only about COUNT keys of the whole server, so on a server holding keys of others it
 * misses most of a test's own.
 */
export async function scanKeys(client: Redis, pattern: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1_000);
    cursor = next;
    found.push(...keys);
  } while (cursor !== '0');
  return found;
}

/** Deletes every key that starts with `prefix` (tests clean up after themselves). */
export async function deleteKeys(client: Redis, prefix: string): Promise<number> {
  let cursor = '0';
  let deleted = 0;
  const pattern = `${prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*`;
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
    cursor = next;
    if (keys.length > 0) deleted += await client.unlink(...keys);
  } while (cursor !== '0');
  return deleted;
}

/**
 * Writes `count` small string keys under a prefix no test uses, as the keys of other applications on
 * a shared server: what a test that must find its own keys among many fills a server of its own with.
 */
export async function fillWithOtherKeys(client: Redis, count: number): Promise<void> {
  const batch = 1_000;
  for (let from = 0; from < count; from += batch) {
    const pairs: string[] = [];
    for (let n = from; n < Math.min(count, from + batch); n++) pairs.push(`other-app:key:${n}`, 'x');
    await client.mset(...pairs);
  }
}

/** A hash tag of its own per test, so tests never see each other's keys. */
export function freshPrefix(): string {
  return `{harrier-test-${randomUUID()}}`;
}

/** A client a test file's fixtures share: opened before its tests, quit after them. */
export interface SharedRedis {
  /** The client; only valid inside tests and hooks. */
  readonly client: Redis;
  /** `make`'s fixture on a fresh prefix, with a `cleanup` that deletes every key under it. */
  withFreshPrefix<T extends object>(
    make: (prefix: string) => T,
  ): Promise<T & { cleanup: () => Promise<void> }>;
}

/** Registers `beforeAll`/`afterAll` hooks that open and quit a client shared by a test file. */
export function useSharedRedis(url: string): SharedRedis {
  let client: Redis | undefined;
  beforeAll(() => {
    client = new Redis(url);
  });
  afterAll(async () => {
    await client?.quit();
  });
  const shared: SharedRedis = {
    get client(): Redis {
      if (client === undefined) throw new Error('The shared Redis client is only open inside tests');
      return client;
    },
    withFreshPrefix: (make) => {
      const prefix = freshPrefix();
      return Promise.resolve({
        ...make(prefix),
        cleanup: async () => {
          await deleteKeys(shared.client, prefix);
        },
      });
    },
  };
  return shared;
}
