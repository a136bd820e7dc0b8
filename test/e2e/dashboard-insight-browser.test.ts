import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DashboardProjectionLag, DashboardTopology } from '../../src/dashboard/index.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
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
const idle = { wait: 0, active: 0, delayed: 0, failed: 0 };

const TOPOLOGY: DashboardTopology = {
  endpoints: [
    {
      endpoint: 'billing',
      registeredAt: at(2),
      subscriptions: [
        {
          subscription: { handler: 'ChargeCard', kind: 'command', types: ['billing.ChargeCard'] },
          queues: [{ name: 'cmd~billing.ChargeCard', wait: 12, active: 4, delayed: 1, failed: 3 }],
          total: { wait: 12, active: 4, delayed: 1, failed: 3 },
        },
        {
          subscription: { handler: 'SendReceipt', kind: 'event', types: ['billing.CardCharged'] },
          queues: [{ name: 'evt~billing~SendReceipt', ...idle, wait: 2 }],
          total: { ...idle, wait: 2 },
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
            { name: 'cmd~orders.PlaceOrder', ...idle, wait: 5, active: 2 },
            { name: 'cmd~orders.PlaceOrder~p0', ...idle, wait: 1 },
            { name: 'cmd~orders.PlaceOrder~p1', ...idle, delayed: 2 },
          ],
          total: { wait: 6, active: 2, delayed: 2, failed: 0 },
        },
        {
          subscription: { handler: 'OrderHistory', kind: 'event', types: ['orders.OrderPlaced'] },
          queues: [{ name: 'evt~orders~OrderHistory', ...idle }],
          total: idle,
        },
      ],
    },
  ],
  unreadable: [],
};

const LAGS: DashboardProjectionLag[] = [
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

describe('the projections and topology pages in a real browser', () => {
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
    served = await serveDashboard({
      deadLetters: store,
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

  it('opens Topology from the header and shows the queues, failed ones highlighted', async () => {
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
    // The highlight is visible, not just a class: the failed count is drawn in red.
    expect(
      await failedCell.evaluate((el) => (globalThis as unknown as BrowserWindow).getComputedStyle(el).color),
    ).toBe('rgb(164, 22, 26)');
    const orders = page.locator('[data-testid=endpoint][data-endpoint=orders] tbody tr');
    // PlaceOrder's three queues and their total, then OrderHistory.
    expect(await orders.count()).toBe(5);
    expect(await orders.nth(3).locator('td').allTextContents()).toEqual(['total', '6', '2', '2', '0']);
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
});
