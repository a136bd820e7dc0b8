import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { buildDeadLetterRecord } from '../../src/dead-letters/dead-letter-record.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

/** A dead letter whose envelope is near the default 1 MiB limit (a payload the bus accepts). */
function bigDeadLetter(blob: string) {
  const messageId = uuidv7();
  return buildDeadLetterRecord({
    body: JSON.stringify({
      v: 1,
      id: messageId,
      kind: 'event',
      type: 'orders.OrderPlaced',
      payload: { blob },
    }),
    facts: {
      messageId,
      kind: 'event',
      type: 'orders.OrderPlaced',
      endpoint: 'billing',
      handler: 'SendInvoice',
      attempt: 1,
      history: [],
      partitionKey: undefined,
    },
    handler: 'SendInvoice',
    reason: 'handler-failed',
    error: { name: 'Error', message: 'boom' },
    ordered: false,
    now: Date.UTC(2026, 0, 1),
  });
}

describe('RedisDeadLetterStore filter scripts on large records', () => {
  let admin: Redis;
  let prefix: string;
  let store: RedisDeadLetterStore;
  beforeAll(() => {
    admin = new Redis(redisUrl);
  });
  afterAll(async () => {
    await admin.quit();
  });
  beforeEach(() => {
    prefix = `{harrier-test-${randomUUID()}}`;
    store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
  });
  afterEach(async () => {
    await store.close();
    await deleteKeys(admin, prefix);
  });

  it('never blocks Redis for long in one script, whatever the size of the records', async () => {
    const blob = 'ABCDEFGHIJ'.repeat(100_000); // 1,000,000 chars
    for (let i = 0; i < 100; i += 1) await store.add(bigDeadLetter(blob));
    const [, before] = (await admin.config('GET', 'slowlog-log-slower-than')) as [string, string];
    await admin.config('SET', 'slowlog-log-slower-than', '0');
    await admin.slowlog('RESET');
    await store.count({ text: 'no such text' });
    const entries = (await admin.slowlog('GET', 1000)) as [number, number, number, string[]][];
    const scripts = entries.filter(
      (e) => String(e[3][0]).toLowerCase().startsWith('evalsha') || String(e[3][0]).toLowerCase() === 'eval',
    );
    const longest = Math.max(...scripts.map((e) => e[2])) / 1000;
    await admin.config('SET', 'slowlog-log-slower-than', before);
    // Each script reads a bounded number of bytes (FILTER_CHUNK_BYTES), so it blocks Redis briefly.
    expect(longest).toBeLessThan(100);
  }, 120_000);

  it('returns the records Node must judge in replies of bounded size', async () => {
    const blob = 'ABCDEFGHIJ'.repeat(100_000); // 1,000,000 chars
    for (let i = 0; i < 100; i += 1) await store.add(bigDeadLetter(blob));
    const [, before] = (await admin.config('GET', 'slowlog-log-slower-than')) as [string, string];
    const [, length] = (await admin.config('GET', 'slowlog-max-len')) as [string, string];
    await admin.config('SET', 'slowlog-log-slower-than', '0');
    // Redis 7 logs the commands a script calls too: keep them all.
    await admin.config('SET', 'slowlog-max-len', '10000');
    await admin.slowlog('RESET');
    // A needle beyond ASCII is compared in Node, so every record travels: 100 MB in all.
    expect(await store.count({ text: 'äöü' })).toBe(0);
    const entries = (await admin.slowlog('GET', 10000)) as [number, number, number, string[]][];
    await admin.config('SET', 'slowlog-log-slower-than', before);
    await admin.config('SET', 'slowlog-max-len', length);
    const scripts = entries.filter((e) => String(e[3][0]).toLowerCase().startsWith('eval'));
    // Each reply stops after the record that crosses 2 MiB, so 100 MB takes at least 34 of them
    // (one reply of every record before the bound).
    expect(scripts.length).toBeGreaterThanOrEqual(34);
  }, 120_000);
});

describe('RedisDeadLetterStore.groups with a fingerprint filter', () => {
  let admin: Redis;
  let prefix: string;
  let store: RedisDeadLetterStore;
  beforeAll(() => {
    admin = new Redis(redisUrl);
  });
  afterAll(async () => {
    await admin.quit();
  });
  beforeEach(() => {
    prefix = `{harrier-test-${randomUUID()}}`;
    store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
  });
  afterEach(async () => {
    await store.close();
    await deleteKeys(admin, prefix);
  });

  it('looks the one group up instead of walking every group in one script', async () => {
    const groups = 40_000;
    for (let i = 0; i < groups; i += 1000) {
      await Promise.all(
        Array.from({ length: 1000 }, (_, j) => {
          const r = bigDeadLetter('x');
          return store.add({ ...r, fingerprint: `fp-${i + j}` });
        }),
      );
    }
    const [, before] = (await admin.config('GET', 'slowlog-log-slower-than')) as [string, string];
    await admin.config('SET', 'slowlog-log-slower-than', '0');
    await admin.slowlog('RESET');
    const page = await store.groups({ fingerprint: 'fp-7' });
    const entries = (await admin.slowlog('GET', 1000)) as [number, number, number, string[]][];
    await admin.config('SET', 'slowlog-log-slower-than', before);
    expect(page.groups.map((g) => g.count)).toEqual([1]);
    const longest = Math.max(...entries.map((e) => e[2])) / 1000;
    expect(longest).toBeLessThan(40);
  }, 300_000);
});
