import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { silentLogger } from '../../src/index.js';
import {
  BullMqBroker,
  RedisCheckpointStore,
  RedisDeadLetterStore,
  RedisEventLog,
  RedisScheduleStore,
} from '../../src/redis/index.js';
import { DASHBOARD_BIN, startDashboardCli, type StartedCli } from '../helpers/dashboard-cli.js';
import { deadLetter, tableRows } from '../helpers/dashboard.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const message = (kind: 'command' | 'event', type: string, extra: { deliverAt?: number } = {}) => ({
  id: randomUUID(),
  kind,
  type,
  body: '{}',
  ...extra,
});

/** Each `<section data-<attribute>="name">` of a page, by name. */
function sections(html: string, attribute: string): Map<string, string> {
  const pattern = new RegExp(`<section [^>]*data-${attribute}="([^"]+)"[\\s\\S]*?</section>`, 'g');
  return new Map([...html.matchAll(pattern)].map((m) => [m[1] ?? '', m[0]]));
}

describe('harrier dashboard: the projections and topology pages on Redis', () => {
  const prefix = freshPrefix();
  let client: Redis;
  let run: StartedCli;
  let url: string;
  /** Records appended per partition of the `orders` topic. */
  const appended = [0, 0];

  beforeAll(async () => {
    if (!existsSync(DASHBOARD_BIN)) throw new Error(`${DASHBOARD_BIN} is missing: run npm run build`);
    client = new Redis(redisUrl);

    // Topology: `shop` has messages waiting and delayed and nobody consuming them; `billing` had
    // one command dead-lettered: its job is failed in BullMQ and its record is in the store.
    const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
    await broker.register('shop', [
      { handler: 'PlaceOrder', kind: 'command', types: ['insight.PlaceOrder'] },
      { handler: 'Audit', kind: 'event', types: ['insight.OrderPlaced'] },
    ]);
    await broker.register('billing', [{ handler: 'Charge', kind: 'command', types: ['insight.Charge'] }]);
    await broker.publishBatch([
      message('command', 'insight.PlaceOrder'),
      message('command', 'insight.PlaceOrder'),
      message('command', 'insight.PlaceOrder', { deliverAt: Date.now() + 3_600_000 }),
      message('event', 'insight.OrderPlaced'),
      message('command', 'insight.Charge'),
    ]);
    const stop = new AbortController();
    const receiving = broker.receiver({ endpoint: 'billing', signal: stop.signal })[Symbol.asyncIterator]();
    const delivery = await receiving.next();
    if (delivery.done === true) throw new Error('the billing receiver ended');
    await broker.nack(delivery.value.id, {
      deadLetter: 'handler-failed',
      error: { name: 'Error', message: 'card declined' },
    });
    stop.abort();
    await receiving.return?.();
    await broker.close();

    // Projections: OrderTotals is checkpointed on partition 0 only, Revenue is caught up everywhere.
    const log = new RedisEventLog({
      connection: redisUrl,
      prefix,
      topics: [{ name: 'orders', partitions: 2 }],
    });
    for (let i = 0; i < 9; i++) {
      const ack = await log.append('orders', {
        id: randomUUID(),
        key: `order-${i}`,
        type: 'insight.OrderPlaced',
        body: '{}',
      });
      appended[ack.partition] = (appended[ack.partition] ?? 0) + 1;
    }
    await log.close();
    const checkpoints = new RedisCheckpointStore({ connection: redisUrl, prefix });
    await checkpoints.commit('OrderTotals', 'orders', 0, (appended[0] ?? 0) - 1, Date.UTC(2026, 0, 31, 12));
    for (const partition of [0, 1]) {
      await checkpoints.commit(
        'Revenue',
        'orders',
        partition,
        (appended[partition] ?? 0) - 1,
        Date.UTC(2026, 0, 31, 13),
      );
    }
    await checkpoints.close();
    const store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    for (const n of [1, 2]) {
      await store.add(deadLetter(n, { handler: 'OrderTotals', reason: 'projection-failed', kind: 'event' }));
    }
    // A PlaceOrder handler of another endpoint than shop's: not shop's dead letter.
    await store.add(deadLetter(3, { handler: 'PlaceOrder' }));
    await store.add(deadLetter(4, { endpoint: 'billing', handler: 'Charge', type: 'insight.Charge' }));
    await store.close();
    const schedules = new RedisScheduleStore({ connection: redisUrl, prefix });
    await schedules.put({
      name: 'nightly-report',
      kind: 'command',
      type: 'insight.Report',
      payload: {},
      cron: '0 2 * * *',
      timeZone: 'Europe/Berlin',
      catchUp: 'one',
      nextRunAt: Date.now() + 3_600_000,
      updatedAt: Date.now(),
    });
    await schedules.close();

    run = startDashboardCli([
      'dashboard',
      '--port',
      '0',
      '--json',
      '--redis-url',
      redisUrl,
      '--prefix',
      prefix,
    ]);
    ({ url } = JSON.parse(await run.firstLine) as { url: string });
  });

  afterAll(async () => {
    run.child.kill('SIGTERM');
    await run.exit;
    await deleteKeys(client, prefix);
    client.disconnect();
  });

  it("links the schedules page and lists the system's recurring schedules on it", async () => {
    const home = await (await fetch(url)).text();
    const res = await fetch(new URL('/schedules', url));
    const text = await res.text();

    expect(home).toContain('<a href="/schedules">Schedules</a>');
    expect(res.status).toBe(200);
    expect(tableRows(text, 'schedules').map((row) => row.slice(0, 3))).toEqual([
      ['nightly-report', '0 2 * * * (Europe/Berlin)', 'command insight.Report'],
    ]);
  });

  it('shows each endpoint’s subscriptions, queue depths and dead letters, highlighting those with dead letters', async () => {
    const res = await fetch(new URL('/topology', url));
    expect(res.status).toBe(200);
    const html = await res.text();
    // waiting 2 + 1 (shop), delayed 1 (shop), 1 dead letter (billing's, from the store).
    expect(tableRows(html, 'topology-total')).toEqual([['2', '3', '3', '0', '1', '1']]);
    const endpoints = sections(html, 'endpoint');
    expect([...endpoints.keys()]).toEqual(['billing', 'shop']);
    expect(tableRows(endpoints.get('shop') ?? '', 'subscriptions')).toEqual([
      ['PlaceOrder', 'command', 'insight.PlaceOrder', '-', 'cmd~insight.PlaceOrder', '2', '0', '1', '0'],
      ['Audit', 'event', 'insight.OrderPlaced', '-', 'evt~shop~Audit', '1', '0', '0', '0'],
    ]);
    const billing = endpoints.get('billing') ?? '';
    expect(tableRows(billing, 'subscriptions')).toEqual([
      ['Charge', 'command', 'insight.Charge', '-', 'cmd~insight.Charge', '0', '0', '0', '1'],
    ]);
    expect(billing).toContain('<tr class="failed">');
    expect(billing).toMatch(/registered \d{4}-\d{2}-\d{2}T/);
  });

  it('shows each projection’s status, partitions and dead letters', async () => {
    expect(appended[1]).toBeGreaterThan(0);
    const res = await fetch(new URL('/projections', url));
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(tableRows(html, 'projections')).toEqual([
      [
        'OrderTotals',
        `behind by ${appended[1]}`,
        String(appended[1]),
        '2026-01-31T12:00:00.000Z',
        '2 dead letters',
      ],
      ['Revenue', 'caught up', '0', '2026-01-31T13:00:00.000Z', '0 dead letters'],
    ]);
    expect(tableRows(sections(html, 'projection').get('OrderTotals') ?? '', 'partitions')).toEqual([
      ['orders', '0', String((appended[0] ?? 0) - 1), String(appended[0]), '0', '2026-01-31T12:00:00.000Z'],
      ['orders', '1', '-', String(appended[1]), String(appended[1]), '-'],
    ]);
    const list = await (await fetch(new URL('/?handler=OrderTotals', url))).text();
    expect(list).toContain('2 matching');
  });
});
