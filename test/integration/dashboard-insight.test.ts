import { afterEach, describe, expect, it } from 'vitest';
import type { Topology } from '../../src/admin/topology.js';
import type { DashboardOptions } from '../../src/dashboard/index.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import type { CheckpointLag } from '../../src/projections/projection-lag.js';
import { deadLetter, serveDashboard, tableRows as rows, type ServedDashboard } from '../helpers/dashboard.js';

let served: ServedDashboard | undefined;

afterEach(async () => {
  await served?.close();
  served = undefined;
});

async function get(path: string): Promise<{ status: number; text: string }> {
  if (served === undefined) throw new Error('no dashboard served');
  const res = await fetch(`${served.url}${path}`, { redirect: 'manual' });
  return { status: res.status, text: await res.text() };
}

async function serve(options: Partial<DashboardOptions> = {}): Promise<void> {
  served = await serveDashboard({ deadLetters: new InMemoryDeadLetterStore(), ...options });
}

const REGISTERED = Date.UTC(2026, 0, 31, 12, 0, 0);

const TOPOLOGY: Topology = {
  endpoints: [
    {
      endpoint: 'billing',
      registeredAt: REGISTERED,
      subscriptions: [
        {
          subscription: { handler: 'ChargeCard', kind: 'command', types: ['billing.ChargeCard'] },
          queues: [{ queue: 'cmd~billing.ChargeCard', waiting: 3, active: 1, delayed: 0 }],
          total: { queue: 'cmd~billing.ChargeCard', waiting: 3, active: 1, delayed: 0 },
        },
      ],
    },
    {
      endpoint: 'orders',
      registeredAt: undefined,
      subscriptions: [
        {
          subscription: {
            handler: 'ShipOrder',
            kind: 'event',
            types: ['orders.OrderPlaced', 'orders.OrderPaid'],
            orderedTypes: ['orders.OrderPlaced'],
          },
          queues: [
            { queue: 'evt~orders~ShipOrder', waiting: 1, active: 0, delayed: 2 },
            { queue: 'evt~orders~ShipOrder~p0', waiting: 0, active: 0, delayed: 0 },
          ],
          total: { queue: 'evt~orders~ShipOrder', waiting: 1, active: 0, delayed: 2 },
        },
      ],
    },
  ],
  unreadable: ['legacy'],
};

/**
 * Four dead letters of ShipOrder in orders; a replayed one, and one of a ShipOrder handler in
 * another endpoint, which the topology page does not count.
 */
async function storeWithShipOrderDeadLetters(): Promise<InMemoryDeadLetterStore> {
  const store = new InMemoryDeadLetterStore();
  const shipOrder = { endpoint: 'orders', handler: 'ShipOrder', kind: 'event' } as const;
  for (const n of [1, 2, 3, 4]) await store.add(deadLetter(n, shipOrder));
  await store.add(deadLetter(5, shipOrder));
  await store.markReplayed('dl-0005', { at: REGISTERED, by: 'ops' });
  await store.add(deadLetter(6, { ...shipOrder, endpoint: 'elsewhere' }));
  return store;
}

const LAGS: CheckpointLag[] = [
  {
    projection: 'OrderSummary',
    topic: 'orders',
    partition: 0,
    checkpoint: 9,
    endOffset: 10,
    lag: 0,
    updatedAt: REGISTERED,
  },
  {
    projection: 'OrderSummary',
    topic: 'orders',
    partition: 1,
    checkpoint: 4,
    endOffset: 8,
    lag: 3,
    updatedAt: REGISTERED + 60_000,
  },
  {
    projection: 'Revenue',
    topic: 'billing',
    partition: 0,
    checkpoint: 19,
    endOffset: 20,
    lag: 0,
    updatedAt: REGISTERED,
  },
  {
    projection: 'Stock',
    topic: 'stock',
    partition: 0,
    checkpoint: undefined,
    endOffset: 5,
    lag: 5,
    updatedAt: undefined,
  },
];

describe('createDashboard: the topology page', () => {
  describe('when given a topology source', () => {
    it('shows each endpoint with its subscriptions, queue depths, dead letters and totals', async () => {
      await serve({
        topology: () => Promise.resolve(TOPOLOGY),
        deadLetters: await storeWithShipOrderDeadLetters(),
      });
      const { status, text } = await get('/topology');
      expect(status).toBe(200);
      expect(rows(text, 'topology-total')).toEqual([['2', '2', '4', '1', '2', '4']]);
      expect(text).toContain('registered 2026-01-31T12:00:00.000Z');
      expect(text).toContain('<h2>orders <span class="muted">registered -</span></h2>');
      const [billing, orders] = [...text.matchAll(/<section [^>]*data-endpoint="(\w+)"[\s\S]*?<\/section>/g)];
      expect(billing?.[1]).toBe('billing');
      expect(rows(billing?.[0] ?? '', 'subscriptions')).toEqual([
        ['ChargeCard', 'command', 'billing.ChargeCard', '-', 'cmd~billing.ChargeCard', '3', '1', '0', '0'],
      ]);
      expect(rows(orders?.[0] ?? '', 'subscriptions')).toEqual([
        [
          'ShipOrder',
          'event',
          'orders.OrderPlaced,orders.OrderPaid',
          'orders.OrderPlaced',
          'evt~orders~ShipOrder',
          '1',
          '0',
          '2',
          '4',
        ],
        ['evt~orders~ShipOrder~p0', '0', '0', '0'],
        ['total', '1', '0', '2'],
      ]);
      expect(text).toContain('Endpoint <code>legacy</code>: its registration could not be read');
    });

    it('highlights the subscriptions with dead letters, and only those, linking to their records', async () => {
      await serve({
        topology: () => Promise.resolve(TOPOLOGY),
        deadLetters: await storeWithShipOrderDeadLetters(),
      });
      const { text } = await get('/topology');
      const failedRows = [...text.matchAll(/<tr class="[^"]*failed[^"]*">(.*?)<\/tr>/g)].map(
        (m) => m[1] ?? '',
      );
      // The overall total, and ShipOrder's two queues and its total.
      expect(failedRows).toHaveLength(4);
      expect(failedRows.some((r) => r.includes('evt~orders~ShipOrder~p0'))).toBe(true);
      expect(failedRows.some((r) => r.includes('cmd~billing.ChargeCard'))).toBe(false);
      expect(text.match(/<td class="num failed">4<\/td>/g)).toHaveLength(1);
      const href = /<a href="([^"]+)" data-testid="subscription-dead-letters">4<\/a>/.exec(text)?.[1] ?? '';
      const params = new URL(href.replaceAll('&amp;', '&'), 'http://x').searchParams;
      expect([params.get('endpoint'), params.get('handler')]).toEqual(['orders', 'ShipOrder']);
      const list = await get(href.replaceAll('&amp;', '&'));
      expect(list.text).toContain('4 matching');
    });

    it('shows no dead letters and highlights nothing when the store holds none', async () => {
      await serve({ topology: () => Promise.resolve(TOPOLOGY) });
      const { text } = await get('/topology');
      expect(rows(text, 'topology-total')).toEqual([['2', '2', '4', '1', '2', '0']]);
      expect(text).not.toContain('class="failed"');
    });

    it('says when no endpoint has registered', async () => {
      await serve({ topology: () => Promise.resolve({ endpoints: [] }) });
      const { status, text } = await get('/topology');
      expect(status).toBe(200);
      expect(text).toContain('data-testid="no-endpoints"');
    });

    it('reads the source on every visit', async () => {
      let calls = 0;
      await serve({
        topology: () => {
          calls += 1;
          return Promise.resolve({ endpoints: [] });
        },
      });
      await get('/topology');
      await get('/topology');
      expect(calls).toBe(2);
    });
  });
});

describe('createDashboard: the projections page', () => {
  async function storeWithProjectionFailures(): Promise<InMemoryDeadLetterStore> {
    const store = new InMemoryDeadLetterStore();
    await store.add(deadLetter(1, { handler: 'OrderSummary', reason: 'projection-failed', kind: 'event' }));
    await store.add(deadLetter(2, { handler: 'OrderSummary', reason: 'validation-failed', kind: 'event' }));
    await store.add(deadLetter(3, { handler: 'PlaceOrderHandler' }));
    return store;
  }

  describe('when given a projections source', () => {
    it('shows a status per projection: caught up, behind by N, no checkpoint yet', async () => {
      await serve({ projections: () => Promise.resolve(LAGS) });
      const { status, text } = await get('/projections');
      expect(status).toBe(200);
      expect(rows(text, 'projections').map((r) => r.slice(0, 4))).toEqual([
        ['OrderSummary', 'behind by 3', '3', '2026-01-31T12:01:00.000Z'],
        ['Revenue', 'caught up', '0', '2026-01-31T12:00:00.000Z'],
        ['Stock', 'no checkpoint yet', '5', '-'],
      ]);
    });

    it('shows checkpoint, end offset, lag and last update per topic and partition', async () => {
      await serve({ projections: () => Promise.resolve(LAGS) });
      const { text } = await get('/projections');
      const sections = new Map(
        [...text.matchAll(/<section [^>]*data-projection="(\w+)"[\s\S]*?<\/section>/g)].map((m) => [
          m[1],
          rows(m[0], 'partitions'),
        ]),
      );
      expect(sections.get('OrderSummary')).toEqual([
        ['orders', '0', '9', '10', '0', '2026-01-31T12:00:00.000Z'],
        ['orders', '1', '4', '8', '3', '2026-01-31T12:01:00.000Z'],
      ]);
      expect(sections.get('Stock')).toEqual([['stock', '0', '-', '5', '5', '-']]);
    });

    it('counts each projection’s dead letters and links to the list filtered by its handler', async () => {
      await serve({
        projections: () => Promise.resolve(LAGS),
        deadLetters: await storeWithProjectionFailures(),
      });
      const { text } = await get('/projections');
      expect(rows(text, 'projections').map((r) => [r[0], r[4]])).toEqual([
        ['OrderSummary', '2 dead letters'],
        ['Revenue', '0 dead letters'],
        ['Stock', '0 dead letters'],
      ]);
      const href = /<a href="([^"]+)" data-testid="projection-dead-letters">2 dead letters<\/a>/.exec(
        text,
      )?.[1];
      expect(href).toBe('/?handler=OrderSummary');
      const list = await get(href ?? '/');
      expect([...list.text.matchAll(/href="\/records\/([^"]+)"/g)].map((m) => m[1])).toEqual([
        'dl-0001',
        'dl-0002',
      ]);
    });

    it('says when no projection has a checkpoint', async () => {
      await serve({ projections: () => Promise.resolve([]) });
      const { status, text } = await get('/projections');
      expect(status).toBe(200);
      expect(text).toContain('data-testid="no-projections"');
    });
  });
});

describe.each([
  { path: '/topology', option: 'topology', call: 'admin.topology()' },
  { path: '/projections', option: 'projections', call: 'admin.projectionLags()' },
] as const)('createDashboard: $path', ({ path, option, call }) => {
  describe(`when no ${option} source is given`, () => {
    it('answers 200 and says what to pass', async () => {
      await serve();
      const { status, text } = await get(path);
      expect(status).toBe(200);
      expect(text).toContain('data-testid="not-configured"');
      expect(text).toContain(`<code>${option}</code>`);
      expect(text).toContain(`${option}: () =&gt; ${call}`);
    });
  });

  describe('when the source throws', () => {
    it('answers 500 naming the failure, with the password masked', async () => {
      const fail = (): Promise<never> =>
        Promise.reject(new TypeError('connect ECONNREFUSED redis://ops:s3cret@10.0.0.5:6379'));
      await serve(option === 'topology' ? { topology: fail } : { projections: fail });
      const { status, text } = await get(path);
      expect(status).toBe(500);
      expect(text).toContain(`The ${option} source failed`);
      expect(text).toContain('TypeError: connect ECONNREFUSED redis://ops:***@10.0.0.5:6379');
      expect(text).not.toContain('s3cret');
    });
  });

  describe('when the source resolves to something of another shape', () => {
    it('answers 500 naming the source, not the dead-letter store', async () => {
      const odd = (): Promise<never> => Promise.resolve({ rows: 'nope' } as never);
      await serve(option === 'topology' ? { topology: odd } : { projections: odd });
      const { status, text } = await get(path);
      expect(status).toBe(500);
      expect(text).toContain(`The ${option} source failed`);
      expect(text).toContain('TypeError');
    });
  });
});

describe('createDashboard: hostile names on the insight pages', () => {
  const evil = '<script>alert(1)</script>"\'&';
  const escaped = '&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;';

  it('escapes endpoint, handler, type and queue names on the topology page', async () => {
    await serve({
      topology: () =>
        Promise.resolve({
          endpoints: [
            {
              endpoint: evil,
              registeredAt: REGISTERED,
              subscriptions: [
                {
                  subscription: { handler: evil, kind: 'event', types: [evil], orderedTypes: [evil] },
                  queues: [{ queue: evil, waiting: 0, active: 0, delayed: 0 }],
                  total: { queue: evil, waiting: 0, active: 0, delayed: 0 },
                },
              ],
            },
          ],
          unreadable: [evil],
        }),
    });
    const { text } = await get('/topology');
    expect(text).not.toContain('<script>');
    // Endpoint heading and attribute, handler, type, ordered type, queue, unreadable endpoint.
    expect(text.split(escaped).length - 1).toBe(7);
  });

  it('escapes projection and topic names on the projections page, and in its dead-letter link', async () => {
    const deadLetters = new InMemoryDeadLetterStore();
    await deadLetters.add(deadLetter(1, { handler: evil, reason: 'projection-failed' }));
    await serve({
      deadLetters,
      projections: () =>
        Promise.resolve([
          {
            projection: evil,
            topic: evil,
            partition: 0,
            checkpoint: 1,
            endOffset: 2,
            lag: 0,
            updatedAt: undefined,
          },
        ]),
    });
    const { text } = await get('/projections');
    expect(text).not.toContain('<script>');
    expect(text).toContain(`<td><code>${escaped}</code></td>`);
    expect(text).toContain(`data-projection="${escaped}"`);
    const href = /<a href="([^"]+)" data-testid="projection-dead-letters">/.exec(text)?.[1] ?? '';
    expect(new URL(href.replaceAll('&amp;', '&'), 'http://x').searchParams.get('handler')).toBe(evil);
  });
});

describe('createDashboard: the page links in the header', () => {
  it('links every page from every page, marking the current one', async () => {
    await serve();
    for (const [path, label] of [
      ['/', 'Dead letters'],
      ['/groups', 'Groups'],
      ['/projections', 'Projections'],
      ['/topology', 'Topology'],
    ] as const) {
      const { text } = await get(path);
      const nav = /<header>[\s\S]*?<nav data-testid="pages"[^>]*>([\s\S]*?)<\/nav>/.exec(text)?.[1] ?? '';
      expect(nav).toContain(`<strong aria-current="page">${label}</strong>`);
      const links = [...nav.matchAll(/<a href="([^"]+)">([^<]+)<\/a>/g)].map((m) => [m[2], m[1]]);
      expect(links).toHaveLength(3);
      expect(links).not.toContainEqual([label, path]);
    }
    const record = await get('/records/nope');
    expect(record.text).toContain('<a href="/projections">Projections</a>');
  });

  it('keeps the filters between Dead letters and Groups, not towards the other pages', async () => {
    await serve();
    const { text } = await get('/?endpoint=orders&reason=handler-failed');
    expect(text).toContain('<a href="/groups?endpoint=orders&amp;reason=handler-failed">Groups</a>');
    expect(text).toContain('<a href="/projections">Projections</a>');
    expect(text).toContain('<a href="/topology">Topology</a>');
    const projections = await get('/projections?endpoint=orders');
    expect(projections.text).toContain('<a href="/">Dead letters</a>');
    expect(projections.text).toContain('<a href="/groups">Groups</a>');
  });
});

async function getWith(options: Partial<DashboardOptions>, path: string): Promise<string> {
  served = await serveDashboard({ deadLetters: new InMemoryDeadLetterStore(), ...options });
  return (await fetch(`${served.url}${path}`)).text();
}

// A source is any function an app passes (`createDashboard` is public API, callable from JS or with
// values read from JSON/Redis as strings); the docs promise "Every value is escaped".
const evil = '<img src=x onerror=alert(1)>' as unknown as number;

describe('createDashboard: numbers from a source on the insight pages', () => {
  it('escapes partition, checkpoint, offsets and lag on the projections page', async () => {
    const lags = [
      { projection: 'p', topic: 't', partition: evil, checkpoint: evil, endOffset: evil, lag: evil },
    ] as CheckpointLag[];
    const text = await getWith({ projections: () => Promise.resolve(lags) }, '/projections');
    expect(text).not.toContain('<img');
  });

  it('escapes queue depths on the topology page', async () => {
    const c = { waiting: evil, active: 0, delayed: 0 };
    const topology: Topology = {
      endpoints: [
        {
          endpoint: 'e',
          subscriptions: [
            {
              subscription: { handler: 'h', kind: 'command', types: ['t'] },
              queues: [{ queue: 'q', ...c }],
              total: { queue: 'q', ...c },
            },
          ],
        },
      ],
    };
    const text = await getWith({ topology: () => Promise.resolve(topology) }, '/topology');
    expect(text).not.toContain('<img');
  });
});
