import { request } from 'node:http';
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  MIN_TOKEN_LENGTH,
  TOKEN_GUESSES_PER_SECOND,
  createDashboard,
  isLoopbackHost,
} from '../../src/dashboard/index.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { deadLetter, serveDashboard, type ServedDashboard } from '../helpers/dashboard.js';

let served: ServedDashboard | undefined;

afterEach(async () => {
  await served?.close();
  served = undefined;
});

async function storeWith(count: number): Promise<InMemoryDeadLetterStore> {
  const store = new InMemoryDeadLetterStore();
  for (let n = 0; n < count; n += 1) {
    await store.add(
      deadLetter(n, {
        type: n % 2 === 0 ? 'orders.PlaceOrder' : 'billing.Charge',
        endpoint: n % 2 === 0 ? 'orders' : 'billing',
        handler: n % 3 === 0 ? 'Audit' : 'Main',
        reason: n % 5 === 0 ? 'validation-failed' : 'handler-failed',
        fingerprint: n % 4 === 0 ? 'fp-a' : 'fp-b',
      }),
    );
  }
  return store;
}

async function get(
  path: string,
  init: RequestInit = {},
): Promise<{ status: number; text: string; res: Response }> {
  if (served === undefined) throw new Error('no dashboard served');
  const res = await fetch(`${served.url}${path}`, { redirect: 'manual', ...init });
  return { status: res.status, text: await res.text(), res };
}

/** Ids of the record links on a list page, in order. */
function ids(html: string): string[] {
  return [...html.matchAll(/href="\/records\/([^"]+)"/g)].map((m) => decodeURIComponent(m[1] ?? ''));
}

describe('createDashboard: the list page', () => {
  it('lists dead letters with their count, newest insertion last', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(3) });
    const { status, text, res } = await get('/');
    expect(status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(ids(text)).toEqual(['dl-0000', 'dl-0001', 'dl-0002']);
    expect(text).toContain('3 matching');
    expect(text).toContain('read-only');
  });

  it.each([
    ['type=billing.Charge', ['dl-0001', 'dl-0003', 'dl-0005']],
    ['endpoint=orders&handler=Audit', ['dl-0000', 'dl-0006']],
    ['reason=validation-failed', ['dl-0000', 'dl-0005']],
    ['fingerprint=fp-a', ['dl-0000', 'dl-0004']],
    // deadLetter(n) fails at 12:00 + n minutes.
    ['since=2026-01-31T12:02:00Z&until=2026-01-31T12:04Z', ['dl-0002', 'dl-0003']],
    ['since=2026-01-31T12:05', ['dl-0005', 'dl-0006']],
  ])('filters by %s', async (query, expected) => {
    served = await serveDashboard({ deadLetters: await storeWith(7) });
    const { status, text } = await get(`/?${query}`);
    expect(status).toBe(200);
    expect(ids(text)).toEqual(expected);
    expect(text).toContain(`${expected.length} matching`);
  });

  it('reads a relative since against its clock', async () => {
    const now = Date.UTC(2026, 0, 31, 12, 10);
    served = await serveDashboard({ deadLetters: await storeWith(7), now: () => now });
    expect(ids((await get('/?since=5m')).text)).toEqual(['dl-0005', 'dl-0006']);
  });

  it('shows replayed records only when the status filter asks for them', async () => {
    const store = await storeWith(2);
    await store.markReplayed('dl-0000', { at: Date.UTC(2026, 1, 1), by: 'ops' });
    served = await serveDashboard({ deadLetters: store });
    expect(ids((await get('/')).text)).toEqual(['dl-0001']);
    expect(ids((await get('/?status=replayed')).text)).toEqual(['dl-0000']);
    expect(ids((await get('/?status=any')).text)).toEqual(['dl-0000', 'dl-0001']);
  });

  it('pages with the store cursor, keeping the filters', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(12) });
    const seen: string[] = [];
    let path: string | undefined = '/?endpoint=orders&limit=4';
    let pages = 0;
    while (path !== undefined) {
      const { status, text } = await get(path);
      expect(status).toBe(200);
      seen.push(...ids(text));
      pages += 1;
      const next = /<a rel="next" href="([^"]+)"/.exec(text)?.[1];
      path = next?.replaceAll('&amp;', '&');
      if (path !== undefined) expect(path).toContain('endpoint=orders');
    }
    expect(pages).toBe(2);
    expect(seen).toEqual(['dl-0000', 'dl-0002', 'dl-0004', 'dl-0006', 'dl-0008', 'dl-0010']);
  });

  it('answers 400 naming the fix for a bad time, status, limit or cursor', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(1) });
    const since = await get('/?since=yesterday');
    expect(since.status).toBe(400);
    expect(since.text).toContain('since &quot;yesterday&quot; is neither an ISO date');
    expect((await get('/?status=gone')).text).toContain('not one of dead, replayed, any');
    expect((await get('/?limit=0')).status).toBe(400);
    const cursor = await get('/?cursor=bogus');
    expect(cursor.status).toBe(400);
    expect(cursor.text).toContain('Bad cursor');
  });

  it('escapes hostile text in records and in the query it echoes', async () => {
    const store = new InMemoryDeadLetterStore();
    const hostile = '<script>alert("x")</script>';
    await store.add(
      deadLetter(1, {
        type: `t${hostile}`,
        error: { name: 'Error', message: hostile, stack: hostile },
        envelope: JSON.stringify({ payload: { note: hostile } }),
      }),
    );
    served = await serveDashboard({ deadLetters: store });
    const list = await get(`/?status=any&endpoint=${encodeURIComponent(`"><script>x</script>`)}`);
    expect(list.text).not.toContain('<script>');
    expect(list.text).toContain('&quot;&gt;&lt;script&gt;x&lt;/script&gt;');
    const record = await get('/records/dl-0001');
    expect(record.status).toBe(200);
    expect(record.text).not.toContain('<script>');
    expect(record.text).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;');
  });
});

describe('createDashboard: search', () => {
  it('finds records by error text and by payload text, case-insensitively', async () => {
    const store = await storeWith(4);
    await store.add(
      deadLetter(9, {
        error: { name: 'Error', message: 'Card DECLINED by issuer' },
        envelope: JSON.stringify({ payload: { coupon: 'SPRING-42' } }),
      }),
    );
    served = await serveDashboard({ deadLetters: store });
    const byError = await get('/?text=card+declined');
    expect(byError.status).toBe(200);
    expect(ids(byError.text)).toEqual(['dl-0009']);
    expect(byError.text).toContain('1 matching');
    expect(ids((await get('/?text=spring-42')).text)).toEqual(['dl-0009']);
    // The default envelope holds orderId "o-<n>": a payload hit on one record.
    expect(ids((await get('/?text=%22o-2%22')).text)).toEqual(['dl-0002']);
    expect(ids((await get('/?text=failure+3')).text)).toEqual(['dl-0003']);
    const none = await get('/?text=nowhere');
    expect(ids(none.text)).toEqual([]);
    expect(none.text).toContain('No dead letters match.');
  });

  it('combines search with the other filters and keeps it in paging links', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(12) });
    const first = await get('/?text=failure&endpoint=orders&limit=2');
    expect(ids(first.text)).toEqual(['dl-0000', 'dl-0002']);
    const next = /<a rel="next" href="([^"]+)">Next page</.exec(first.text)?.[1]?.replaceAll('&amp;', '&');
    expect(next).toContain('text=failure');
    expect(ids((await get(next ?? '/')).text)).toEqual(['dl-0004', 'dl-0006']);
  });

  it('escapes the search text it echoes', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(1) });
    const hostile = '"><script>alert(1)</script>';
    const { status, text } = await get(`/?text=${encodeURIComponent(hostile)}`);
    expect(status).toBe(200);
    expect(text).not.toContain('<script>');
    expect(text).toContain('value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"');
  });

  it('offers more, not the end, when a search page is short but the store has more to read', async () => {
    class ShortPages extends InMemoryDeadLetterStore {
      override async list(...args: Parameters<InMemoryDeadLetterStore['list']>) {
        const [filter, options] = args;
        if (filter?.text !== undefined && options?.cursor === undefined) {
          return { records: [], next: (await super.list(filter, { limit: 1 })).next ?? 'unused' };
        }
        return super.list(...args);
      }
    }
    const store = new ShortPages();
    for (let n = 0; n < 3; n += 1) await store.add(deadLetter(n));
    served = await serveDashboard({ deadLetters: store });
    const { text } = await get('/?text=failure');
    expect(text).toContain('the search has more to read');
    expect(text).toMatch(/<a rel="next" href="[^"]+">More \(search continues\)<\/a>/);
    expect(text).not.toContain('data-testid="end"');
    const all = await get('/');
    expect(all.text).toContain('data-testid="end"');
  });
});

describe('createDashboard: the groups page', () => {
  /** Fingerprint, count and link of each group row, in order. */
  function groupRows(html: string): { fingerprint: string; count: number; href: string }[] {
    return [
      ...html.matchAll(/<tr><td class="num">(\d+)<\/td>.*?<a href="([^"]+)"><code>([^<]*)<\/code>/g),
    ].map((m) => ({
      count: Number(m[1]),
      href: (m[2] ?? '').replaceAll('&amp;', '&'),
      fingerprint: m[3] ?? '',
    }));
  }

  it('shows one row per fingerprint with its count, newest last failure first', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(7) });
    const { status, text } = await get('/groups');
    expect(status).toBe(200);
    // fp-a: dl-0, dl-4 (last at 12:04); fp-b: dl-1, 2, 3, 5, 6 (last at 12:06).
    expect(groupRows(text).map(({ fingerprint, count }) => [fingerprint, count])).toEqual([
      ['fp-b', 5],
      ['fp-a', 2],
    ]);
    expect(text).toContain('2026-01-31T12:00:00.000Z');
    expect(text).toContain('2026-01-31T12:04:00.000Z');
    expect(text).toContain('2026-01-31T12:06:00.000Z');
    expect(text).toContain('<a href="/">Dead letters</a>');
  });

  it('links each group to the list filtered by its fingerprint, keeping the filters', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(7) });
    const rows = groupRows((await get('/groups?endpoint=orders')).text);
    // endpoint=orders: dl-0, 2, 4, 6 -> fp-b has 2, 6 and fp-a has 0, 4.
    expect(rows.map((r) => r.count)).toEqual([2, 2]);
    const fpA = rows.find((r) => r.fingerprint === 'fp-a');
    expect(fpA?.href).toBe('/?endpoint=orders&fingerprint=fp-a');
    const list = await get(fpA?.href ?? '/');
    expect(ids(list.text)).toEqual(['dl-0000', 'dl-0004']);
    expect(list.text).toContain('<a href="/groups?endpoint=orders&amp;fingerprint=fp-a">Groups</a>');
  });

  it('filters groups by search text and status, and pages them by cursor', async () => {
    const store = new InMemoryDeadLetterStore();
    for (let n = 0; n < 5; n += 1) await store.add(deadLetter(n, { fingerprint: `fp-${n}` }));
    await store.markReplayed('dl-0004', { at: Date.UTC(2026, 1, 1), by: 'ops' });
    served = await serveDashboard({ deadLetters: store });
    expect(groupRows((await get('/groups?text=failure+2')).text).map((r) => r.fingerprint)).toEqual(['fp-2']);
    expect(groupRows((await get('/groups?status=replayed')).text).map((r) => r.fingerprint)).toEqual([
      'fp-4',
    ]);
    const seen: string[] = [];
    let path: string | undefined = '/groups?limit=3';
    let pages = 0;
    while (path !== undefined) {
      const { status, text } = await get(path);
      expect(status).toBe(200);
      seen.push(...groupRows(text).map((r) => r.fingerprint));
      pages += 1;
      path = /<a rel="next" href="([^"]+)"/.exec(text)?.[1]?.replaceAll('&amp;', '&');
      if (path !== undefined) expect(path).toMatch(/^\/groups\?limit=3&cursor=/);
    }
    expect(pages).toBe(2);
    expect(seen).toEqual(['fp-3', 'fp-2', 'fp-1', 'fp-0']);
  });

  it('escapes group fields and answers 400 for a bad cursor or filter', async () => {
    const store = new InMemoryDeadLetterStore();
    const hostile = '<script>alert("g")</script>';
    await store.add(
      deadLetter(1, {
        type: hostile,
        handler: hostile,
        fingerprint: `fp${hostile}`,
        error: { name: 'E', message: hostile },
      }),
    );
    served = await serveDashboard({ deadLetters: store });
    const { text } = await get('/groups');
    expect(text).not.toContain('<script>');
    expect(text).toContain('&lt;script&gt;alert(&quot;g&quot;)&lt;/script&gt;');
    expect((await get('/groups?cursor=bogus')).status).toBe(400);
    expect((await get('/groups?since=never')).status).toBe(400);
  });
});

describe('createDashboard: the record page', () => {
  it('shows the envelope as indented JSON, error, stack, attempts and replays', async () => {
    const store = new InMemoryDeadLetterStore();
    const error = {
      name: 'TypeError',
      message: 'cannot read total',
      stack: 'TypeError: cannot read total\n    at charge (/app/billing.ts:3:1)',
    };
    await store.add(
      deadLetter(7, {
        error,
        attempts: [
          { attempt: 1, at: Date.UTC(2026, 0, 31, 11), error: { name: 'Error', message: 'timeout' } },
          { attempt: 2, at: Date.UTC(2026, 0, 31, 12), error },
        ],
        attemptCount: 2,
      }),
    );
    await store.markReplayed('dl-0007', { at: Date.UTC(2026, 1, 2, 9), by: 'alice' });
    served = await serveDashboard({ deadLetters: store });
    const { status, text } = await get('/records/dl-0007');
    expect(status).toBe(200);
    expect(text).toContain('TypeError: cannot read total');
    expect(text).toContain('at charge (/app/billing.ts:3:1)');
    expect(text).toContain('&quot;orderId&quot;: &quot;o-7&quot;');
    expect(text).toContain('Error: timeout');
    expect(text).toContain('2026-02-02T09:00:00.000Z');
    expect(text).toContain('alice');
  });

  it("shows the message version from the envelope's ver: 1 without one, - when the envelope is not JSON", async () => {
    const store = new InMemoryDeadLetterStore();
    const envelope = (ver?: number): string =>
      JSON.stringify({
        id: 'm',
        type: 'orders.PlaceOrder',
        ...(ver !== undefined ? { ver } : {}),
        payload: {},
      });
    await store.add(deadLetter(0, { envelope: envelope() }));
    await store.add(deadLetter(1, { envelope: envelope(3) }));
    await store.add(deadLetter(2, { envelope: '{"id":' }));
    served = await serveDashboard({ deadLetters: store });

    const list = (await get('/')).text;
    const versions = [...list.matchAll(/<td>orders\.PlaceOrder<\/td><td class="num">([^<]*)<\/td>/g)].map(
      (m) => m[1],
    );
    expect(list).toContain('<th>Type</th><th>Version</th>');
    expect(versions).toEqual(['1', '3', '-']);
    const shown = await Promise.all(
      ['dl-0000', 'dl-0001', 'dl-0002'].map(async (id) => (await get(`/records/${id}`)).text),
    );
    expect(shown.map((text) => /<dt>Version<\/dt><dd>([^<]*)<\/dd>/.exec(text)?.[1])).toEqual([
      '1',
      '3',
      '-',
    ]);
  });

  it("shows each replay's outcome: failed again, handled and when, or pending", async () => {
    const store = new InMemoryDeadLetterStore();
    const replayOutcomes = async (id: string): Promise<string[]> => {
      served = await serveDashboard({ deadLetters: store });
      const { text } = await get(`/records/${id}`);
      await served.close();
      served = undefined;
      return [...text.matchAll(/data-testid="replay-outcome">([^<]*)</g)].map((m) => m[1] ?? '');
    };
    const day = (d: number, h = 0): number => Date.UTC(2026, 1, d, h);
    await store.add(deadLetter(1, { lastFailedAt: day(1) }));
    await store.markReplayed('dl-0001', { at: day(2), by: 'alice' });
    expect(await replayOutcomes('dl-0001')).toEqual(['pending']);
    await store.add(deadLetter(1, { lastFailedAt: day(2, 1) }));
    expect(await replayOutcomes('dl-0001')).toEqual(['failed again 2026-02-02T01:00:00.000Z']);
    await store.markReplayed('dl-0001', { at: day(3), by: 'bob' });
    await store.markReplayHandled('dl-0001', day(3, 2));
    expect(await replayOutcomes('dl-0001')).toEqual(['failed again', 'handled 2026-02-03T02:00:00.000Z']);
  });

  it('answers 404 for an unknown record or path, and 405 for a method it has no use for', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(1) });
    expect((await get('/records/nope')).status).toBe(404);
    expect((await get('/elsewhere')).status).toBe(404);
    const put = await get('/', { method: 'PUT' });
    expect(put.status).toBe(405);
    expect(put.res.headers.get('allow')).toBe('GET, HEAD, POST');
  });

  it('masks the password of a Redis URL given as its source', async () => {
    served = await serveDashboard({
      deadLetters: await storeWith(1),
      source: 'redis://ops:s3cret@redis.internal:6379/0',
    });
    const { text } = await get('/');
    expect(text).toContain('redis://ops:***@redis.internal:6379/0');
    expect(text).not.toContain('s3cret');
  });
});

describe('createDashboard: safety', () => {
  it('requires a token off loopback, naming the fix', () => {
    const deadLetters = new InMemoryDeadLetterStore();
    for (const host of ['0.0.0.0', '::', '10.0.0.5', 'dash.example.com']) {
      let thrown: unknown;
      try {
        createDashboard({ deadLetters, host });
      } catch (error) {
        thrown = error;
      }
      expect(HarrierError.is(thrown, 'invalid-option')).toBe(true);
      expect((thrown as Error).message).toContain('pass token');
    }
    for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]']) {
      expect(isLoopbackHost(host)).toBe(true);
      expect(() => createDashboard({ deadLetters, host })).not.toThrow();
    }
    expect(() => createDashboard({ deadLetters, host: '0.0.0.0', token: 'a-token-of-16-chr' })).not.toThrow();
  });

  it('checks the token from a header, a bearer, or the cookie a ?token= visit sets', async () => {
    served = await serveDashboard({ deadLetters: await storeWith(1), token: 'open-sesame-please' });
    const bare = await get('/');
    expect(bare.status).toBe(401);
    expect(bare.text).not.toContain('dl-0000');
    expect((await get('/', { headers: { 'x-harrier-token': 'wrong' } })).status).toBe(401);
    expect((await get('/', { headers: { 'x-harrier-token': 'open-sesame-please' } })).status).toBe(200);
    expect((await get('/', { headers: { authorization: 'Bearer open-sesame-please' } })).status).toBe(200);
    expect((await get('/?token=wrong')).status).toBe(401);

    const visit = await get('/records/dl-0000?token=open-sesame-please&x=1');
    expect(visit.status).toBe(303);
    expect(visit.res.headers.get('location')).toBe('/records/dl-0000?x=1');
    const cookie = visit.res.headers.get('set-cookie') ?? '';
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    const after = await get('/records/dl-0000', { headers: { cookie: cookie.split(';')[0] ?? '' } });
    expect(after.status).toBe(200);
    expect(after.text).toContain('failure 0');
    expect(after.text).not.toContain('open-sesame-please');
  });
});

/** Sends `head` as the raw request (request line and headers) and resolves with the whole answer. */
function rawRequest(head: string): Promise<string> {
  if (served === undefined) throw new Error('no dashboard served');
  const { port } = new URL(served.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () => {
      socket.end(head);
    });
    let answer = '';
    socket.setEncoding('utf8').on('data', (chunk: string) => (answer += chunk));
    socket.once('error', reject);
    socket.once('close', () => {
      resolve(answer);
    });
  });
}

/** GET `path` from the local address `from` (any of 127.0.0.0/8), resolving with the status. */
function getFrom(from: string, path: string, headers: Record<string, string> = {}): Promise<number> {
  if (served === undefined) throw new Error('no dashboard served');
  const url = new URL(path, served.url);
  return new Promise((resolve, reject) => {
    const req = request(url, { localAddress: from, headers }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once('error', reject);
    req.end();
  });
}

describe('createDashboard: a request', () => {
  describe('when its target is no URL', () => {
    it('answers 400 with a short page, not a store failure', async () => {
      served = await serveDashboard({
        deadLetters: await storeWith(1),
        source: 'redis://db.internal {shop}',
      });
      const answer = await rawRequest(
        'GET http://[ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n',
      );
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
      expect(answer).toContain('<h1>Bad request</h1>');
      expect(answer).not.toContain('store failed');
      expect(answer).not.toContain('db.internal');
    });
  });
});

describe('createDashboard: signing in', () => {
  const token = 'sign-in-token-0123456789';

  describe('when a request has no token or a wrong one', () => {
    it('answers 401 with a styled sign-in page that tells nothing about the store', async () => {
      served = await serveDashboard({
        deadLetters: await storeWith(1),
        token,
        allowActions: true,
        source: 'redis://ops:pw@db.internal:6379 {shop}',
      });
      for (const init of [{}, { headers: { 'x-harrier-token': 'a-wrong-token-123456' } }]) {
        const { status, text } = await get('/', init);
        expect(status).toBe(401);
        expect(text).toContain('<h1>Sign in</h1>');
        expect(text).toContain('<link rel="stylesheet" href="/dashboard.css">');
        for (const secret of ['db.internal', '{shop}', 'actions allowed', 'read-only', 'Groups']) {
          expect(text).not.toContain(secret);
        }
      }
      const wrongVisit = await get('/?token=a-wrong-token-123456');
      expect(wrongVisit.status).toBe(401);
      expect(wrongVisit.text).not.toContain('db.internal');
      const css = await get('/dashboard.css');
      expect(css.status).toBe(200);
      expect(css.res.headers.get('content-type')).toBe('text/css; charset=utf-8');
      expect(css.text).toContain('header');
    });
  });

  describe('when the token is too short to be secret', () => {
    it(`refuses one under ${MIN_TOKEN_LENGTH} characters with invalid-option, naming the fix`, () => {
      const deadLetters = new InMemoryDeadLetterStore();
      for (const host of ['0.0.0.0', '127.0.0.1']) {
        let thrown: unknown;
        try {
          createDashboard({ deadLetters, host, token: 'a' });
        } catch (error) {
          thrown = error;
        }
        expect(HarrierError.is(thrown, 'invalid-option')).toBe(true);
        expect((thrown as Error).message).toContain(`at least ${MIN_TOKEN_LENGTH}`);
      }
      expect(() =>
        createDashboard({ deadLetters, host: '0.0.0.0', token: 'x'.repeat(MIN_TOKEN_LENGTH) }),
      ).not.toThrow();
    });
  });

  describe(`when an address presents more than ${TOKEN_GUESSES_PER_SECOND} wrong tokens a second`, () => {
    it('answers 429 with Retry-After, even to the right token, until its allowance refills', async () => {
      let now = Date.UTC(2026, 1, 1);
      served = await serveDashboard({ deadLetters: await storeWith(1), token, now: () => now });
      const wrong = { headers: { 'x-harrier-token': 'a-wrong-token-123456' } };
      const right = { headers: { 'x-harrier-token': token } };
      // A visit without a token is no guess.
      for (let n = 0; n < 10; n++) expect((await get('/')).status).toBe(401);
      for (let n = 0; n < TOKEN_GUESSES_PER_SECOND; n++) expect((await get('/', wrong)).status).toBe(401);
      const refused = await get('/', right);
      expect(refused.status).toBe(429);
      expect(refused.res.headers.get('retry-after')).toBe('1');
      expect(refused.text).not.toContain('dl-0000');
      expect((await get('/?token=a-wrong-token-123456')).status).toBe(429);
      // Another address keeps its own allowance.
      expect(await getFrom('127.0.0.2', '/', { 'x-harrier-token': token })).toBe(200);

      now += 1000 / TOKEN_GUESSES_PER_SECOND;
      expect((await get('/', right)).status).toBe(200);
      expect((await get('/', wrong)).status).toBe(401);
      expect((await get('/', right)).status).toBe(429);
      now += 1000;
      expect((await get('/', right)).status).toBe(200);
    });
  });
});
