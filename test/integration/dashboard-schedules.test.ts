import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresScheduleStore } from '../../src/postgres/postgres-schedule-store.js';
import { RedisScheduleStore } from '../../src/redis/redis-schedule-store.js';
import type { ScheduleRecord } from '../../src/schedules/schedule-record.js';
import type { ScheduleStore } from '../../src/schedules/schedule-store.js';
import { CSRF_COOKIE } from '../../src/dashboard/dashboard-csrf.js';
import { serveDashboard, tableRows, unescape, type ServedDashboard } from '../helpers/dashboard.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redis = useSharedRedis(inject('redisUrl'));
const { pool } = useSharedPostgres(inject('databaseUrl'));
const T0 = Date.UTC(2026, 0, 1);
/** The dashboard's clock: ten minutes after T0. */
const NOW = T0 + 10 * 60_000;
const CLOSE_DAY_MESSAGE = '019b7a4e-5e00-7000-8000-00000000c10e';

const closeDay: ScheduleRecord = {
  name: 'close-day',
  kind: 'command',
  type: 'billing.CloseDay',
  payload: { ledger: 'eu' },
  cron: '0 18 * * 1-5',
  timeZone: 'Europe/Berlin',
  catchUp: 'one',
  lastTickAt: T0 - 7 * 3_600_000,
  lastMessageId: CLOSE_DAY_MESSAGE,
  nextRunAt: T0 + 17 * 3_600_000,
  updatedAt: T0,
};
/** Due at T0 + 30 s and never ticked: overdue at NOW. */
const heartbeat: ScheduleRecord = {
  name: 'heartbeat',
  kind: 'event',
  type: 'ops.Heartbeat',
  payload: {},
  everyMs: 30_000,
  catchUp: 'none',
  nextRunAt: T0 + 30_000,
  updatedAt: T0,
};
/** A name and type a page must escape; no tick yet, next run after NOW. */
const hostile: ScheduleRecord = {
  name: 'a-<script>alert(1)</script>',
  kind: 'command',
  type: 'x.<b>Bold</b>',
  payload: {},
  everyMs: 3_600_000,
  catchUp: 'one',
  nextRunAt: T0 + 3_600_000,
  updatedAt: T0,
};

const prefix = freshPrefix();
const schema = freshSchema();
let served: ServedDashboard | undefined;

beforeAll(async () => {
  await migratePostgres(pool, { schema });
});
afterEach(async () => {
  await served?.close();
  served = undefined;
});
afterAll(async () => {
  await deleteKeys(redis.client, prefix);
  await dropSchema(pool, schema);
});

async function get(path: string): Promise<{ status: number; text: string }> {
  if (served === undefined) throw new Error('no dashboard served');
  const res = await fetch(`${served.url}${path}`);
  return { status: res.status, text: await res.text() };
}

describe.each([
  ['Redis', (): ScheduleStore => new RedisScheduleStore({ connection: redis.client, prefix })],
  ['PostgreSQL', (): ScheduleStore => new PostgresScheduleStore({ connection: pool, schema })],
] as const)('createDashboard: the schedules page on %s', (_backend, storeOf) => {
  let store: ScheduleStore;
  beforeAll(async () => {
    store = storeOf();
    for (const record of [heartbeat, closeDay, hostile]) await store.put(record);
  });
  afterAll(async () => {
    await store.close();
  });

  it('lists each schedule by name with its timing, message, last tick, next run and its outcome, linked from the header', async () => {
    served = await serveDashboard({
      deadLetters: new InMemoryDeadLetterStore(),
      schedules: store,
      now: () => NOW,
    });

    const { status, text } = await get('/schedules');

    expect(status).toBe(200);
    expect(text).toContain('<strong aria-current="page">Schedules</strong>');
    expect(text).toContain('Schedules <span class="muted">(3)</span>');
    expect(tableRows(text, 'schedules')).toEqual([
      [
        'a-&lt;script&gt;alert(1)&lt;/script&gt;',
        'every 3600000 ms',
        'command x.&lt;b&gt;Bold&lt;/b&gt;',
        'one',
        '-',
        '2026-01-01T01:00:00.000Z',
        'no tick sent yet',
      ],
      [
        'close-day',
        '0 18 * * 1-5 (Europe/Berlin)',
        'command billing.CloseDay',
        'one',
        '2025-12-31T17:00:00.000Z',
        '2026-01-01T17:00:00.000Z',
        `sent ${CLOSE_DAY_MESSAGE}`,
      ],
      [
        'heartbeat',
        'every 30000 ms',
        'event ops.Heartbeat',
        'none',
        '-',
        '2026-01-01T00:00:30.000Z',
        'overdue (no tick sent yet)',
      ],
    ]);
    expect(text).not.toContain('<script>alert(1)');
    expect(text).toContain('<tr data-schedule="heartbeat" class="failed">');
    const dead = await get('/');
    expect(dead.text).toContain('<a href="/schedules">Schedules</a>');
  });

  it("shows a tick's failed send, then the tick recorded since: the last tick moves and the schedule is no longer overdue", async () => {
    const heartbeatRow = async (): Promise<string[] | undefined> => {
      served = await serveDashboard({
        deadLetters: new InMemoryDeadLetterStore(),
        schedules: store,
        now: () => NOW,
      });
      try {
        return tableRows((await get('/schedules')).text, 'schedules').find((r) => r[0] === 'heartbeat');
      } finally {
        await served.close();
        served = undefined;
      }
    };
    const other = storeOf();
    try {
      expect(
        await other.recordTickFailure('heartbeat', T0 + 9 * 60_000 + 30_000, {
          message: 'Broker <b>down</b>',
          at: T0 + 9 * 60_000 + 30_005,
        }),
      ).toBe(true);
      expect((await heartbeatRow())?.slice(4)).toEqual([
        '-',
        '2026-01-01T00:00:30.000Z',
        'overdue (send failed: Broker &lt;b&gt;down&lt;/b&gt; at 2026-01-01T00:09:30.005Z)',
      ]);
      expect(
        await other.recordTick(
          'heartbeat',
          T0 + 9 * 60_000 + 30_000,
          T0 + 10 * 60_000 + 30_000,
          'heartbeat-message-id',
        ),
      ).toBe(true);
    } finally {
      await other.close();
    }

    expect((await heartbeatRow())?.slice(4)).toEqual([
      '2026-01-01T00:09:30.000Z',
      '2026-01-01T00:10:30.000Z',
      'sent heartbeat-message-id',
    ]);
  });
});

describe('createDashboard: the schedules page without a schedule store', () => {
  it('is not linked from the header and says what to pass', async () => {
    served = await serveDashboard({ deadLetters: new InMemoryDeadLetterStore() });

    const list = await get('/');
    const page = await get('/schedules');

    expect(list.text).not.toContain('href="/schedules"');
    expect(page.status).toBe(200);
    expect(page.text).toContain('data-testid="not-configured"');
    expect(page.text).toContain('schedules: admin.scheduleStore()');
  });

  it('says when the store is empty, and answers 500 naming the failure when it fails', async () => {
    const emptySchema = freshSchema();
    await migratePostgres(pool, { schema: emptySchema });
    const empty = new PostgresScheduleStore({ connection: pool, schema: emptySchema });
    try {
      served = await serveDashboard({ deadLetters: new InMemoryDeadLetterStore(), schedules: empty });
      expect((await get('/schedules')).text).toContain('data-testid="schedules-empty"');
      await served.close();
      // A schema never migrated: the store's query fails.
      const missing = new PostgresScheduleStore({ connection: pool, schema: freshSchema() });
      served = await serveDashboard({ deadLetters: new InMemoryDeadLetterStore(), schedules: missing });
      const failed = await get('/schedules');
      expect(failed.status).toBe(500);
      expect(failed.text).toContain('data-testid="source-failed"');
    } finally {
      await empty.close();
      await dropSchema(pool, emptySchema);
    }
  });
});

describe('createDashboard: cancelling a schedule', () => {
  it('offers Cancel only with actions allowed, removes the schedule behind the CSRF check, and says so', async () => {
    const cancelSchema = freshSchema();
    await migratePostgres(pool, { schema: cancelSchema });
    const store = new PostgresScheduleStore({ connection: pool, schema: cancelSchema });
    try {
      await store.put(closeDay);
      await store.put(heartbeat);
      served = await serveDashboard({ deadLetters: new InMemoryDeadLetterStore(), schedules: store });
      expect((await get('/schedules')).text).not.toContain('data-action="schedule-cancel"');
      await served.close();

      served = await serveDashboard({
        deadLetters: new InMemoryDeadLetterStore(),
        schedules: store,
        allowActions: true,
      });
      const url = served.url;
      const page = await fetch(`${url}/schedules`);
      const text = await page.text();
      expect(text.match(/data-action="schedule-cancel"/g)).toHaveLength(2);
      const cookie = (page.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
      expect(cookie.startsWith(`${CSRF_COOKIE}=`)).toBe(true);
      const csrf = unescape(/name="csrf" value="([^"]+)"/.exec(text)?.[1] ?? '');
      const post = (fields: [string, string][]): Promise<Response> =>
        fetch(`${url}/actions/schedule-cancel`, {
          method: 'POST',
          redirect: 'manual',
          headers: { 'content-type': 'application/x-www-form-urlencoded', origin: url, cookie },
          body: new URLSearchParams(fields).toString(),
        });

      const forged = await post([
        ['csrf', 'not-the-token'],
        ['name', 'heartbeat'],
      ]);
      expect(forged.status).toBe(403);
      expect(await store.get('heartbeat')).toBeDefined();

      const cancelled = await post([
        ['csrf', csrf],
        ['name', 'heartbeat'],
      ]);
      expect(cancelled.status).toBe(303);
      expect(cancelled.headers.get('location')).toBe('/schedules?cancelled=heartbeat');
      expect(await store.get('heartbeat')).toBeUndefined();
      const after = (await get('/schedules?cancelled=heartbeat')).text;
      expect(after).toContain('data-testid="schedule-cancelled"');
      expect(tableRows(after, 'schedules').map((row) => row[0])).toEqual(['close-day']);

      const again = await post([
        ['csrf', csrf],
        ['name', 'heartbeat'],
      ]);
      expect(again.headers.get('location')).toBe('/schedules?gone=heartbeat');
      expect((await get('/schedules?gone=heartbeat')).text).toContain('data-testid="schedule-gone"');
    } finally {
      await store.close();
      await dropSchema(pool, cancelSchema);
    }
  });
});
