import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { launchBrowser } from '../helpers/browser.js';
import { deadLetter, screenshot, serveDashboard, type ServedDashboard } from '../helpers/dashboard.js';

describe('the dashboard in a real browser', () => {
  let browser: Browser;
  let served: ServedDashboard;

  beforeAll(async () => {
    const store = new InMemoryDeadLetterStore();
    for (let n = 0; n < 6; n += 1) {
      const charge = n % 3 === 0;
      const error = charge
        ? {
            name: 'CardDeclined',
            message: `card ending 42${n} was declined`,
            stack: `CardDeclined: card ending 42${n} was declined\n    at ChargeCard.handle (/app/billing/charge-card.ts:31:11)`,
          }
        : {
            name: 'TypeError',
            message: "Cannot read properties of undefined (reading 'sku')",
            stack:
              "TypeError: Cannot read properties of undefined (reading 'sku')\n    at PlaceOrder.handle (/app/orders/place-order.ts:18:7)",
          };
      await store.add(
        deadLetter(n, {
          id: `dl-${n}`,
          type: charge ? 'billing.ChargeCard' : 'orders.PlaceOrder',
          endpoint: charge ? 'billing' : 'orders',
          handler: charge ? 'ChargeCard' : 'PlaceOrder',
          fingerprint: charge ? '3f9a1c0d2b7e' : 'a81b44e09c15',
          error,
          attempts: [1, 2, 3].map((attempt) => ({
            attempt,
            at: Date.UTC(2026, 0, 31, 12, n, attempt * 5),
            error,
          })),
          attemptCount: 3,
          envelope: JSON.stringify({
            id: `0190b7e2-0000-7000-8000-00000000000${n}`,
            type: charge ? 'billing.ChargeCard' : 'orders.PlaceOrder',
            payload: charge ? { orderId: `o-${n}`, amount: 4200 + n } : { orderId: `o-${n}`, lines: [] },
          }),
        }),
      );
    }
    served = await serveDashboard({
      deadLetters: store,
      source: 'redis://ops:hidden@redis.internal:6379 {shop}',
    });
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser.close();
    await served.close();
  });

  it('lists, filters by type, and opens a record with its error and envelope', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${served.url}/`);
    const rows = page.locator('[data-testid=records] tbody tr');
    await expect.poll(() => rows.count()).toBe(6);
    expect(await page.locator('header').textContent()).toContain('redis://ops:***@redis.internal:6379');
    await screenshot(page, 'list');

    await page.fill('input[name=type]', 'billing.ChargeCard');
    await Promise.all([page.waitForURL(/type=billing\.ChargeCard/), page.click('button[type=submit]')]);
    expect(await rows.count()).toBe(2);
    expect(await page.locator('[data-testid=total]').textContent()).toBe('2 matching');
    await screenshot(page, 'filtered');

    await Promise.all([page.waitForURL(/\/records\/dl-3$/), rows.nth(1).locator('a').first().click()]);
    expect(await page.locator('[data-testid=error]').textContent()).toBe(
      'CardDeclined: card ending 423 was declined',
    );
    const envelope = (await page.locator('[data-testid=envelope]').textContent()) ?? '';
    expect(JSON.parse(envelope)).toMatchObject({ type: 'billing.ChargeCard', payload: { amount: 4203 } });
    expect(await page.locator('[data-testid=attempts] tbody tr').count()).toBe(3);
    await screenshot(page, 'record');
    await page.close();
  });

  it('searches, opens the groups page and follows a group to its records', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${served.url}/`);
    const rows = page.locator('[data-testid=records] tbody tr');
    await page.fill('input[name=text]', '"AMOUNT":4203');
    await Promise.all([page.waitForURL(/[?&]text=/), page.click('button[type=submit]')]);
    expect(await rows.count()).toBe(1);
    expect(await rows.first().locator('a').first().getAttribute('href')).toBe('/records/dl-3');
    expect(await page.inputValue('input[name=text]')).toBe('"AMOUNT":4203');

    await page.goto(`${served.url}/`);
    await Promise.all([page.waitForURL(/\/groups$/), page.click('[data-testid=pages] a:text("Groups")')]);
    const groups = page.locator('[data-testid=groups] tbody tr');
    expect(await groups.count()).toBe(2);
    // orders (dl-1, 2, 4, 5) failed last at 12:05, billing (dl-0, 3) at 12:03.
    expect(await groups.nth(0).locator('td').first().textContent()).toBe('4');
    expect(await groups.nth(1).locator('td').first().textContent()).toBe('2');
    await screenshot(page, 'groups');

    await Promise.all([page.waitForURL(/\/\?fingerprint=3f9a1c0d2b7e$/), groups.nth(1).locator('a').click()]);
    expect(await rows.count()).toBe(2);
    expect(await page.locator('[data-testid=total]').textContent()).toBe('2 matching');
    await page.close();
  });
});
