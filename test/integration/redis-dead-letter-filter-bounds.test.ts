import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildDeadLetterRecord } from '../../src/dead-letters/dead-letter-record.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { startRedisServer, type LocalRedis } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

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

/** One command as SLOWLOG reports it: id, start, duration in µs, arguments. */
type SlowlogEntry = [number, number, number, string[]];

/**
 * Every command Redis ran during `action` (Redis 7 also logs those a script calls), logging all of
 * them while it runs; the server's settings are restored after.
 */
async function commandsDuring<T>(admin: Redis, action: () => Promise<T>): Promise<[T, SlowlogEntry[]]> {
  const [, threshold] = (await admin.config('GET', 'slowlog-log-slower-than')) as [string, string];
  const [, length] = (await admin.config('GET', 'slowlog-max-len')) as [string, string];
  await admin.config('SET', 'slowlog-log-slower-than', '0');
  await admin.config('SET', 'slowlog-max-len', '10000');
  await admin.slowlog('RESET');
  try {
    const result = await action();
    return [result, (await admin.slowlog('GET', 10000)) as SlowlogEntry[]];
  } finally {
    await admin.config('SET', 'slowlog-log-slower-than', threshold);
    await admin.config('SET', 'slowlog-max-len', length);
  }
}

const scriptsOf = (entries: SlowlogEntry[]) =>
  entries.filter((e) => String(e[3][0]).toLowerCase().startsWith('eval'));

describe('RedisDeadLetterStore filter script bounds', () => {
  // A server of its own: the tests read every command it ran from its slowlog, which they turn on
  // for all commands, and 100 MB of records would weigh on the other files' server.
  let server: LocalRedis;
  let admin: Redis;
  let prefix: string;
  let store: RedisDeadLetterStore;
  beforeAll(async () => {
    server = await startRedisServer('harrier-filter-bounds-');
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    await admin.quit();
    server.stop();
  });
  beforeEach(() => {
    prefix = freshPrefix();
    store = new RedisDeadLetterStore({ connection: server.url, prefix });
  });
  afterEach(async () => {
    await store.close();
    await deleteKeys(admin, prefix);
  });

  async function addBigRecords(): Promise<void> {
    const blob = 'ABCDEFGHIJ'.repeat(100_000); // 1,000,000 chars
    for (let i = 0; i < 100; i += 1) await store.add(bigDeadLetter(blob));
  }

  it('never blocks Redis for long in one script, whatever the size of the records', async () => {
    await addBigRecords();
    const [, entries] = await commandsDuring(admin, () => store.count({ text: 'no such text' }));
    const scripts = scriptsOf(entries);
    // Each script reads a bounded number of bytes (FILTER_CHUNK_BYTES, 2 MiB), so the 100 MB of
    // records take many scripts, each blocking Redis briefly. The count says so whatever the load;
    // the time only bounds it loosely, since other test files on a 2-core runner stretch a script's
    // wall time (up to 270 ms seen, against under 100 ms alone).
    expect(scripts.length).toBeGreaterThanOrEqual(34);
    const longest = Math.max(...scripts.map((e) => e[2])) / 1000;
    expect(longest).toBeLessThan(1_000);
  }, 120_000);

  it('returns the records Node must judge in replies of bounded size', async () => {
    await addBigRecords();
    // A needle beyond ASCII is compared in Node, so every record travels: 100 MB in all.
    const [n, entries] = await commandsDuring(admin, () => store.count({ text: 'äöü' }));
    expect(n).toBe(0);
    // Each reply stops after the record that crosses 2 MiB, so 100 MB takes at least 34 of them
    // (one reply of every record before the bound).
    expect(scriptsOf(entries).length).toBeGreaterThanOrEqual(34);
  }, 120_000);

  it('groups with a fingerprint look the one group up instead of walking every group', async () => {
    const groups = 40_000;
    for (let i = 0; i < groups; i += 1000) {
      await Promise.all(
        Array.from({ length: 1000 }, (_, j) => {
          const r = bigDeadLetter('x');
          return store.add({ ...r, fingerprint: `fp-${i + j}` });
        }),
      );
    }
    const [page, entries] = await commandsDuring(admin, () => store.groups({ fingerprint: 'fp-7' }));
    expect(page.groups.map((g) => g.count)).toEqual([1]);
    const longest = Math.max(...entries.map((e) => e[2])) / 1000;
    expect(longest).toBeLessThan(40);
  }, 300_000);
});
