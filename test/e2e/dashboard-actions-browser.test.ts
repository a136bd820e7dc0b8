import 'reflect-metadata';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { createBus, defineCommand, silentLogger, type MessageBus } from '../../src/index.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { launchBrowser } from '../helpers/browser.js';
import {
  failingWhile,
  screenshot,
  serveDashboard,
  type FaultSwitch,
  type ServedDashboard,
} from '../helpers/dashboard.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const PlaceOrder = defineCommand('shop.PlaceOrder', {
  schema: z.object({ orderId: z.string(), sku: z.string() }),
});
const ChargeCard = defineCommand('billing.ChargeCard', {
  schema: z.object({ orderId: z.string(), amount: z.number() }),
});

/** Serves `html` on a free loopback port: another site, as far as the browser can tell. */
async function serveHtml(html: string): Promise<{ url: string; server: Server }> {
  const server = createServer((_, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html);
  });
  await new Promise<void>((resolve) => {
    server.listen(0, '127.0.0.1', resolve);
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, server };
}

describe('dashboard actions in a real browser, on Redis', () => {
  const prefix = freshPrefix();
  const state: FaultSwitch = { failing: true, handled: [] };
  let bus: MessageBus;
  let store: RedisDeadLetterStore;
  let browser: Browser;
  let actions: ServedDashboard;
  let readOnly: ServedDashboard;

  beforeAll(async () => {
    const handlers = [
      failingWhile(
        PlaceOrder,
        state,
        'InventoryOffline',
        (p) => `inventory service is offline (sku ${p.sku})`,
      ),
      failingWhile(ChargeCard, state, 'GatewayTimeout', () => 'card gateway timed out'),
    ];
    bus = createBus({
      endpoint: 'shop',
      broker: new BullMqBroker({ connection: redisUrl, prefix, partitions: 2, logger: silentLogger }),
      deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix }),
      handlers,
      logger: silentLogger,
    });
    await bus.start();
    for (let n = 1; n <= 3; n += 1) await bus.send(PlaceOrder, { orderId: `o-${n}`, sku: `SKU-${n}` });
    for (let n = 1; n <= 2; n += 1) await bus.send(ChargeCard, { orderId: `c-${n}`, amount: 4200 + n });
    await waitFor('five dead letters', async () => (await bus.deadLetters.count()) === 5, {
      timeoutMs: 15_000,
    });
    store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    actions = await serveDashboard({
      deadLetters: store,
      allowActions: true,
      replay: (ids, o) => bus.replayDeadLetters(ids, o),
      source: `redis://127.0.0.1 ${prefix}`,
    });
    readOnly = await serveDashboard({ deadLetters: store });
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser.close();
    await actions.close();
    await readOnly.close();
    await bus.stop({ gracePeriodMs: 500 });
    await store.close();
    const client = new Redis(redisUrl);
    await deleteKeys(client, prefix);
    client.disconnect();
  });

  it('refuses an action posted from another site, and replays nothing', async () => {
    const [record] = (await store.list({ type: ChargeCard.type })).records;
    const evil = await serveHtml(
      `<!doctype html><form method="post" action="${actions.url}/actions/replay"><input type="hidden" name="id" value="${record?.id ?? ''}"><input type="hidden" name="csrf" value="guess"><button>Win a prize</button></form>`,
    );
    try {
      const page = await browser.newPage();
      // The browser holds a CSRF cookie of the dashboard, as a victim who used it would.
      await page.goto(`${actions.url}/`);
      await page.goto(evil.url);
      const [response] = await Promise.all([
        page.waitForResponse(`${actions.url}/actions/replay`),
        page.click('button'),
      ]);
      expect(response.status()).toBe(403);
      expect(await page.locator('h1').textContent()).toBe('Refused: cross-site request');
      expect(await page.locator('[role=alert]').textContent()).toContain('Sec-Fetch-Site: same-site');
      expect((await store.get(record?.id ?? ''))?.replays).toEqual([]);
      await page.close();
    } finally {
      await new Promise((resolve) => evil.server.close(resolve));
    }
  });

  it('a read-only dashboard shows no actions and refuses a POST on the server', async () => {
    const page = await browser.newPage();
    await page.goto(`${readOnly.url}/`);
    await expect.poll(() => page.locator('[data-testid=records] tbody tr').count()).toBe(5);
    expect(await page.locator('form[method=post]').count()).toBe(0);
    expect(await page.locator('input[type=checkbox]').count()).toBe(0);
    await page.goto(`${readOnly.url}/groups`);
    expect(await page.locator('form[method=post]').count()).toBe(0);
    const [record] = (await store.list()).records;
    await page.goto(`${readOnly.url}/records/${record?.id ?? ''}`);
    expect(await page.locator('button').count()).toBe(0);
    const refused = await page.request.post(`${readOnly.url}/actions/purge`, {
      form: { id: record?.id ?? '', confirm: 'yes' },
      headers: { origin: readOnly.url },
    });
    expect(refused.status()).toBe(403);
    expect(await refused.text()).toContain('started without --allow-actions');
    expect(await store.count()).toBe(5);
    await page.close();
  });

  it('requires a token off loopback: none -> 401, ?token= -> in', async () => {
    const guarded = await serveDashboard({
      deadLetters: store,
      host: '0.0.0.0',
      token: 'pa55-w0rd-pa55-w0rd',
    });
    try {
      const page = await browser.newPage();
      const refused = await page.goto(`${guarded.url}/`);
      expect(refused?.status()).toBe(401);
      expect(await page.locator('h1').textContent()).toBe('Sign in');
      const admitted = await page.goto(`${guarded.url}/groups?token=pa55-w0rd-pa55-w0rd`);
      expect(admitted?.status()).toBe(200);
      expect(page.url()).toBe(`${guarded.url}/groups`);
      expect(await page.locator('[data-testid=groups] tbody tr').count()).toBe(2);
      await page.close();
    } finally {
      await guarded.close();
    }
  });

  it('list -> filter -> search -> record -> groups -> replay a group -> every replayed message handled', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${actions.url}/`);
    const rows = page.locator('[data-testid=records] tbody tr');
    await expect.poll(() => rows.count()).toBe(5);
    expect(await page.locator('input[type=checkbox][name=id]').count()).toBe(5);

    await page.fill('input[name=type]', PlaceOrder.type);
    await Promise.all([
      page.waitForURL(/type=shop\.PlaceOrder/),
      page.click('form.filters button[type=submit]'),
    ]);
    expect(await rows.count()).toBe(3);

    await page.fill('input[name=text]', 'SKU-2');
    await Promise.all([page.waitForURL(/text=SKU-2/), page.click('form.filters button[type=submit]')]);
    expect(await rows.count()).toBe(1);

    await Promise.all([page.waitForURL(/\/records\//), rows.first().locator('a').first().click()]);
    expect(await page.locator('[data-testid=error]').textContent()).toContain(
      'inventory service is offline (sku SKU-2)',
    );
    expect(await page.locator('button[data-action=replay]').count()).toBe(1);

    await page.goto(`${actions.url}/`);
    await Promise.all([page.waitForURL(/\/groups$/), page.click('[data-testid=pages] a:text("Groups")')]);
    const groups = page.locator('[data-testid=groups] tbody tr');
    expect(await groups.count()).toBe(2);
    const orders = groups.filter({ hasText: PlaceOrder.type });
    expect(await orders.locator('td').first().textContent()).toBe('3');

    state.failing = false;
    await Promise.all([
      page.waitForURL(/\/replays\/[0-9a-f-]{36}$/),
      orders.locator('button[data-action=replay]').click(),
    ]);
    // The page reloads itself (meta refresh) until each replayed message has an outcome.
    await expect
      .poll(() => page.locator('[data-testid=count-handled] strong').textContent(), { timeout: 15_000 })
      .toBe('3');
    expect(await page.locator('[data-testid=progress]').textContent()).toBe('3/3');
    expect(await page.locator('[data-testid=outcomes] tbody tr[data-state=handled]').count()).toBe(3);
    expect(await page.locator('meta[http-equiv=refresh]').count()).toBe(0);
    expect(state.handled.sort()).toEqual(['o-1', 'o-2', 'o-3']);
    await screenshot(page, 'replay');
    await page.close();
  });

  it('purges a selection after a confirmation page', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${actions.url}/?type=${ChargeCard.type}`);
    const boxes = page.locator('input[type=checkbox][name=id]');
    expect(await boxes.count()).toBe(2);
    await boxes.nth(0).check();
    await boxes.nth(1).check();
    await Promise.all([page.waitForURL(/\/actions\/purge$/), page.click('button:text("Purge selected")')]);
    expect(await page.locator('h1').textContent()).toBe('Purge 2 dead letters?');
    expect(await store.count({ type: ChargeCard.type })).toBe(2);
    await screenshot(page, 'purge-confirm');
    await page.click('button[data-action=confirm-purge]');
    await expect.poll(() => page.locator('[data-testid=purged]').textContent()).toBe('Purged 2 dead letters');
    expect(await store.count({ type: ChargeCard.type, status: 'any' })).toBe(0);
    await page.close();
  });
});
