import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Topology } from '../../src/admin/topology.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import type { CheckpointLag } from '../../src/projections/projection-lag.js';
import { InMemoryScheduleStore } from '../../src/schedules/in-memory-schedule-store.js';
import { tickMessageId } from '../../src/schedules/recurring-schedules.js';
import type { ScheduleRecord } from '../../src/schedules/schedule-record.js';
import { launchBrowser, updateScreenshots } from '../helpers/browser.js';
import { deadLetter, serveDashboard, type ServedDashboard } from '../helpers/dashboard.js';

const images = join(import.meta.dirname, '..', '..', 'docs', 'images');

/** Writes docs/images/dashboard-<name>.png when UPDATE_SCREENSHOTS=1, so CI never rewrites them. */
async function screenshot(page: Page, name: string): Promise<void> {
  if (updateScreenshots())
    await page.screenshot({ path: join(images, `dashboard-${name}.png`), fullPage: true });
}

/** What the test asks of the page's window (the tests compile without the DOM library). */
interface BrowserWindow {
  getComputedStyle(element: unknown): { readonly color: string };
}

const at = (minute: number): number => Date.UTC(2026, 0, 31, 12, minute, 0);
const idle = { waiting: 0, active: 0, delayed: 0 };

const TOPOLOGY: Topology = {
  endpoints: [
    {
      endpoint: 'billing',
      registeredAt: at(2),
      subscriptions: [
        {
          subscription: { handler: 'ChargeCard', kind: 'command', types: ['billing.ChargeCard'] },
          queues: [{ queue: 'cmd~billing.ChargeCard', waiting: 12, active: 4, delayed: 1 }],
          total: { queue: 'cmd~billing.ChargeCard', waiting: 12, active: 4, delayed: 1 },
        },
        {
          subscription: { handler: 'SendReceipt', kind: 'event', types: ['billing.CardCharged'] },
          queues: [{ queue: 'evt~billing~SendReceipt', ...idle, waiting: 2 }],
          total: { queue: 'evt~billing~SendReceipt', ...idle, waiting: 2 },
        },
      ],
    },
    {
      endpoint: 'orders',
      registeredAt: at(1),
      subscriptions: [
        {
          subscription: {
            handler: 'PlaceOrder',
            kind: 'command',
            types: ['orders.PlaceOrder', 'orders.CancelOrder'],
            orderedTypes: ['orders.PlaceOrder'],
          },
          queues: [
            { queue: 'cmd~orders.PlaceOrder', ...idle, waiting: 5, active: 2 },
            { queue: 'cmd~orders.PlaceOrder~p0', ...idle, waiting: 1 },
            { queue: 'cmd~orders.PlaceOrder~p1', ...idle, delayed: 2 },
          ],
          total: { queue: 'cmd~orders.PlaceOrder', waiting: 6, active: 2, delayed: 2 },
        },
        {
          subscription: { handler: 'OrderHistory', kind: 'event', types: ['orders.OrderPlaced'] },
          queues: [{ queue: 'evt~orders~OrderHistory', ...idle }],
          total: { queue: 'evt~orders~OrderHistory', ...idle },
        },
      ],
    },
  ],
  unreadable: [],
};

const LAGS: CheckpointLag[] = [
  {
    projection: 'OrderSummary',
    topic: 'orders',
    partition: 0,
    checkpoint: 1841,
    endOffset: 1842,
    lag: 0,
    updatedAt: at(5),
  },
  {
    projection: 'OrderSummary',
    topic: 'orders',
    partition: 1,
    checkpoint: 1702,
    endOffset: 1740,
    lag: 37,
    updatedAt: at(4),
  },
  {
    projection: 'Revenue',
    topic: 'billing',
    partition: 0,
    checkpoint: 905,
    endOffset: 906,
    lag: 0,
    updatedAt: at(5),
  },
  {
    projection: 'StockLevels',
    topic: 'stock',
    partition: 0,
    checkpoint: undefined,
    endOffset: 12,
    lag: 12,
    updatedAt: undefined,
  },
];

/** The dashboard's clock: ten seconds past 12:30. */
const NOW = at(30) + 10_000;

const SCHEDULES: ScheduleRecord[] = [
  {
    name: 'close-day',
    kind: 'command',
    type: 'billing.CloseDay',
    payload: { ledger: 'eu' },
    cron: '0 18 * * 1-5',
    timeZone: 'Europe/Berlin',
    catchUp: 'one',
    lastTickAt: Date.UTC(2026, 0, 30, 17),
    lastMessageId: tickMessageId('close-day', Date.UTC(2026, 0, 30, 17)),
    nextRunAt: Date.UTC(2026, 1, 2, 17),
    updatedAt: at(1),
  },
  {
    name: 'heartbeat',
    kind: 'event',
    type: 'ops.Heartbeat',
    payload: {},
    everyMs: 30_000,
    catchUp: 'none',
    lastTickAt: at(30),
    lastMessageId: tickMessageId('heartbeat', at(30)),
    nextRunAt: at(30) + 30_000,
    updatedAt: at(1),
  },
  {
    // Its 12:00 tick has failed to send since: the broker is down for the process that runs it.
    name: 'invoice-reminders',
    kind: 'command',
    type: 'billing.SendReminders',
    payload: {},
    cron: '0 * * * *',
    timeZone: 'UTC',
    catchUp: 'one',
    lastTickAt: at(-60),
    lastMessageId: tickMessageId('invoice-reminders', at(-60)),
    lastError: { message: 'connect ECONNREFUSED 10.0.4.12:6379', at: at(30) + 5_000 },
    nextRunAt: at(0),
    updatedAt: at(1),
  },
  {
    name: 'sync-stock',
    kind: 'command',
    type: 'stock.SyncLevels',
    payload: { warehouse: 'north' },
    everyMs: 3_600_000,
    catchUp: 'one',
    nextRunAt: at(60),
    updatedAt: at(25),
  },
];

describe('the projections, topology and schedules pages in a real browser', () => {
  let browser: Browser;
  let served: ServedDashboard;

  beforeAll(async () => {
    const store = new InMemoryDeadLetterStore();
    for (const n of [1, 2]) {
      await store.add(
        deadLetter(n, {
          id: `dl-${n}`,
          kind: 'event',
          type: 'orders.OrderPlaced',
          handler: 'OrderSummary',
          reason: 'projection-failed',
        }),
      );
    }
    for (const n of [3, 4, 5]) {
      await store.add(
        deadLetter(n, {
          id: `dl-${n}`,
          type: 'billing.ChargeCard',
          endpoint: 'billing',
          handler: 'ChargeCard',
        }),
      );
    }
    const schedules = new InMemoryScheduleStore();
    for (const record of SCHEDULES) await schedules.put(record);
    served = await serveDashboard({
      deadLetters: store,
      schedules,
      now: () => NOW,
      source: 'redis://ops:hidden@redis.internal:6379 {shop}',
      topology: () => Promise.resolve(TOPOLOGY),
      projections: () => Promise.resolve(LAGS),
    });
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser.close();
    await served.close();
  });

  it('opens Topology from the header and shows the queues, subscriptions with dead letters highlighted', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${served.url}/`);
    await Promise.all([
      page.waitForURL(/\/topology$/),
      page.click('header [data-testid=pages] a:text("Topology")'),
    ]);
    expect(await page.locator('header [aria-current=page]').textContent()).toBe('Topology');
    const billing = page.locator('[data-testid=endpoint][data-endpoint=billing] tbody tr');
    expect(await billing.count()).toBe(2);
    const failedCell = billing.first().locator('td.failed');
    expect(await failedCell.textContent()).toBe('3');
    // The highlight is visible, not just a class: the dead-letter count is drawn in red.
    expect(
      await failedCell.evaluate((el) => (globalThis as unknown as BrowserWindow).getComputedStyle(el).color),
    ).toBe('rgb(164, 22, 26)');
    const orders = page.locator('[data-testid=endpoint][data-endpoint=orders] tbody tr');
    // PlaceOrder's three queues and their total, then OrderHistory.
    expect(await orders.count()).toBe(5);
    expect(await orders.nth(3).locator('td').allTextContents()).toEqual(['total', '6', '2', '2']);
    await screenshot(page, 'topology');
    await page.close();
  });

  it('opens Projections from the header and follows a projection to its dead letters', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${served.url}/topology`);
    await Promise.all([
      page.waitForURL(/\/projections$/),
      page.click('header [data-testid=pages] a:text("Projections")'),
    ]);
    const summary = page.locator('[data-testid=projections] tbody tr');
    expect(await summary.count()).toBe(3);
    expect(await summary.locator('.status').allTextContents()).toEqual([
      'behind by 37',
      'caught up',
      'no checkpoint yet',
    ]);
    await screenshot(page, 'projections');

    await Promise.all([
      page.waitForURL(/\/\?handler=OrderSummary$/),
      summary.first().locator('[data-testid=projection-dead-letters]').click(),
    ]);
    expect(await page.locator('[data-testid=total]').textContent()).toBe('2 matching');
    expect(await page.inputValue('input[name=handler]')).toBe('OrderSummary');
    await page.close();
  });

  it("opens Schedules from the header and shows each schedule's next run, last tick and its outcome", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${served.url}/`);
    await Promise.all([
      page.waitForURL(/\/schedules$/),
      page.click('header [data-testid=pages] a:text("Schedules")'),
    ]);
    const rows = page.locator('[data-testid=schedules] tbody tr');
    expect(await rows.count()).toBe(4);
    const outcomes = await rows.evaluateAll((trs) =>
      trs.map(
        (tr) =>
          (tr as unknown as { cells: { item(i: number): { textContent: string } } }).cells.item(6)
            .textContent,
      ),
    );
    expect(outcomes).toEqual([
      `sent ${tickMessageId('close-day', Date.UTC(2026, 0, 30, 17))}`,
      `sent ${tickMessageId('heartbeat', at(30))}`,
      'overdue (send failed: connect ECONNREFUSED 10.0.4.12:6379 at 2026-01-31T12:30:05.000Z)',
      'no tick sent yet',
    ]);
    const failed = page.locator('[data-schedule="invoice-reminders"] td').nth(6);
    expect(
      await failed.evaluate((el) => (globalThis as unknown as BrowserWindow).getComputedStyle(el).color),
    ).toBe('rgb(164, 22, 26)');
    await screenshot(page, 'schedules');
    await page.close();
  });
});
