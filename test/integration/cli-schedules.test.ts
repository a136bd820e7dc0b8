import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { runCli } from '../helpers/cli-in-process.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresScheduleStore } from '../../src/postgres/postgres-schedule-store.js';
import { RedisScheduleStore } from '../../src/redis/redis-schedule-store.js';
import type { ScheduleRecord } from '../../src/schedules/schedule-record.js';
import type { ScheduleStore } from '../../src/schedules/schedule-store.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const databaseUrl = inject('databaseUrl');
const redis = useSharedRedis(redisUrl);
const { pool } = useSharedPostgres(databaseUrl);
const T0 = Date.UTC(2026, 0, 1);
const CLOSE_DAY_MESSAGE = '019b7a4e-5e00-7000-8000-00000000c10e';

/** The CLI in this process; `tty` for tables, else JSON lines. */
const harrier = (args: readonly string[], tty: boolean) => runCli(args, { tty });

const closeDay: ScheduleRecord = {
  name: 'close-day',
  kind: 'command',
  type: 'billing.CloseDay',
  payload: { ledger: 'eu' },
  cron: '0 18 * * 1-5',
  timeZone: 'Europe/Berlin',
  catchUp: 'one',
  lastTickAt: T0 + 17 * 3_600_000,
  lastMessageId: CLOSE_DAY_MESSAGE,
  nextRunAt: T0 + 41 * 3_600_000,
  updatedAt: T0,
};
const heartbeat: ScheduleRecord = {
  name: 'heartbeat',
  kind: 'event',
  type: 'ops.Heartbeat',
  payload: {},
  everyMs: 30_000,
  catchUp: 'none',
  nextRunAt: T0 + 30_000,
  // Its first tick's send failed: the broker was down.
  lastError: { message: 'Redis is unreachable at 127.0.0.1:6379', at: T0 + 30_005 },
  updatedAt: T0,
};

const prefix = freshPrefix();
const schema = freshSchema();
beforeAll(async () => {
  await migratePostgres(pool, { schema });
});
afterAll(async () => {
  await deleteKeys(redis.client, prefix);
  await dropSchema(pool, schema);
});

describe.each([
  [
    'Redis',
    () => ['--url', redisUrl, '--prefix', prefix],
    (): ScheduleStore => new RedisScheduleStore({ connection: redis.client, prefix }),
  ],
  [
    'PostgreSQL',
    () => ['--url', databaseUrl, '--schema', schema],
    (): ScheduleStore => new PostgresScheduleStore({ connection: pool, schema }),
  ],
] as const)('harrier schedules on %s', (_backend, where, storeOf) => {
  beforeAll(async () => {
    const store = storeOf();
    await store.put(closeDay);
    await store.put(heartbeat);
    await store.close();
  });

  it("list prints a table by name with each last tick's outcome, and JSON lines without payloads", async () => {
    const table = await harrier(['schedules', 'list', ...where()], true);
    expect(table.code).toBe(0);
    const lines = table.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+TIMING\s+SENDS\s+LAST TICK\s+NEXT RUN\s+OUTCOME$/);
    expect(lines[1]).toMatch(
      /^close-day\s+0 18 \* \* 1-5 \(Europe\/Berlin\)\s+command billing\.CloseDay\s+2026-01-01T17:00:00Z\s+2026-01-02T17:00:00Z\s+sent 019b7a4e-5e00-7000-8000-00000000c10e$/,
    );
    expect(lines[2]).toMatch(
      /^heartbeat\s+every 30000 ms\s+event ops\.Heartbeat\s+-\s+2026-01-01T00:00:30Z\s+send failed: Redis is unreachable at 127\.0\.0\.1:6379 at 2026-01-01T00:00:30\.005Z$/,
    );
    const json = await harrier(['schedules', 'list', ...where()], false);
    const rows = json.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rows.map((r) => r.name)).toEqual(['close-day', 'heartbeat']);
    expect(rows[1]).toEqual({
      name: 'heartbeat',
      kind: 'event',
      type: 'ops.Heartbeat',
      cron: null,
      timeZone: null,
      everyMs: 30000,
      catchUp: 'none',
      lastTickAt: null,
      lastMessageId: null,
      lastError: { message: 'Redis is unreachable at 127.0.0.1:6379', at: '2026-01-01T00:00:30.005Z' },
      outcome: 'send failed: Redis is unreachable at 127.0.0.1:6379 at 2026-01-01T00:00:30.005Z',
      nextRunAt: '2026-01-01T00:00:30.000Z',
      updatedAt: '2026-01-01T00:00:00.000Z',
    });
  });

  it('show prints one schedule with its payload, and exits 4 for an unknown name', async () => {
    const shown = await harrier(['schedules', 'show', 'close-day', ...where()], true);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain('  timing     0 18 * * 1-5 (Europe/Berlin)');
    expect(shown.stdout).toContain('  last tick  2026-01-01T17:00:00.000Z');
    expect(shown.stdout).toContain(`  outcome    sent ${CLOSE_DAY_MESSAGE}`);
    expect(shown.stdout).toContain('"ledger": "eu"');
    const json = await harrier(['schedules', 'show', 'close-day', ...where()], false);
    expect(JSON.parse(json.stdout)).toMatchObject({
      name: 'close-day',
      lastMessageId: CLOSE_DAY_MESSAGE,
      lastError: null,
      outcome: `sent ${CLOSE_DAY_MESSAGE}`,
      payload: { ledger: 'eu' },
    });
    const missing = await harrier(['schedules', 'show', 'nope', ...where()], true);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toContain('harrier schedules list');
  });

  it('cancel removes a schedule, then exits 4 for it; a missing name is a usage error', async () => {
    const cancelled = await harrier(['schedules', 'cancel', 'heartbeat', ...where()], false);
    expect(cancelled.code).toBe(0);
    expect(JSON.parse(cancelled.stdout)).toEqual({ name: 'heartbeat', cancelled: true });
    const store = storeOf();
    expect(await store.get('heartbeat')).toBeUndefined();
    expect(await store.get('close-day')).toBeDefined();
    await store.close();
    expect((await harrier(['schedules', 'cancel', 'heartbeat', ...where()], true)).code).toBe(4);
    expect((await harrier(['schedules', 'cancel', ...where()], true)).code).toBe(2);
  });
});
