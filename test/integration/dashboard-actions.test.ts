import 'reflect-metadata';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CSRF_COOKIE, type DashboardOptions } from '../../src/dashboard/index.js';
import { defineCommand } from '../../src/index.js';
import { MAX_REPLAY_RECORDS } from '../../src/dashboard/dashboard-actions.js';
import type { DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { createTestBus, type TestBus } from '../../src/testing/index.js';
import {
  deadLetter,
  failingWhile,
  serveDashboard,
  type FaultSwitch,
  type ServedDashboard,
  unescape,
} from '../helpers/dashboard.js';
import { waitFor } from '../helpers/local-redis.js';

const PlaceOrder = defineCommand('dash.PlaceOrder', { schema: z.object({ orderId: z.string() }) });
const ChargeCard = defineCommand('dash.ChargeCard', { schema: z.object({ orderId: z.string() }) });

let served: ServedDashboard | undefined;
const buses: TestBus[] = [];

afterEach(async () => {
  await served?.close();
  served = undefined;
  for (const bus of buses.splice(0)) await bus.stop({ gracePeriodMs: 100 });
});

/** A bus whose handlers fail for good while `state.failing`, with `orders` + `charges` dead letters. */
async function busWithDeadLetters(orders: number, charges = 0) {
  const state: FaultSwitch = { failing: true, handled: [] };
  const bus = await createTestBus({
    handlers: [
      failingWhile(PlaceOrder, state, 'InventoryOffline', () => 'inventory is offline'),
      failingWhile(ChargeCard, state, 'GatewayDown', () => 'card gateway is down'),
    ],
  });
  buses.push(bus);
  for (let n = 0; n < orders; n += 1) await bus.send(PlaceOrder, { orderId: `o-${n}` });
  for (let n = 0; n < charges; n += 1) await bus.send(ChargeCard, { orderId: `c-${n}` });
  await bus.whenIdle();
  const records: DeadLetterRecord[] = [];
  let cursor: string | undefined;
  do {
    const page = await bus.deadLetters.list({}, cursor === undefined ? {} : { cursor });
    records.push(...page.records);
    cursor = page.next;
  } while (cursor !== undefined);
  expect(records).toHaveLength(orders + charges);
  const idOf = (orderId: string): string => {
    const record = records.find((r) => r.envelope.includes(`"${orderId}"`));
    if (record === undefined) throw new Error(`no dead letter for ${orderId}`);
    return record.id;
  };
  return { bus, state, records, idOf };
}

async function serve(bus: TestBus, options: Partial<DashboardOptions> = {}): Promise<ServedDashboard> {
  served = await serveDashboard({
    deadLetters: bus.deadLetters,
    allowActions: true,
    replay: (ids, o) => bus.replayDeadLetters(ids, o),
    now: () => bus.clock.now(),
    ...options,
  });
  return served;
}

/** A browser stand-in: keeps the CSRF cookie, sends the dashboard's own Origin unless told otherwise. */
class Client {
  cookie = '';

  constructor(readonly base: string) {}

  async get(path: string): Promise<{ status: number; text: string; res: Response }> {
    const res = await fetch(`${this.base}${path}`, {
      redirect: 'manual',
      headers: this.cookie === '' ? {} : { cookie: this.cookie },
    });
    const set = res.headers.get('set-cookie');
    if (set !== null && set.startsWith(`${CSRF_COOKIE}=`)) this.cookie = set.split(';')[0] ?? '';
    return { status: res.status, text: await res.text(), res };
  }

  /** The CSRF token the pages put in their forms (after a first GET). */
  async token(): Promise<string> {
    const { text } = await this.get('/');
    const match = /name="csrf" value="([^"]+)"/.exec(text);
    if (match?.[1] === undefined) throw new Error('no CSRF field on the list page');
    return unescape(match[1]);
  }

  async post(
    path: string,
    fields: [string, string][],
    headers: Record<string, string> = {},
  ): Promise<{ status: number; text: string; res: Response }> {
    const res = await fetch(`${this.base}${path}`, {
      method: 'POST',
      redirect: 'manual',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        origin: this.base,
        ...(this.cookie === '' ? {} : { cookie: this.cookie }),
        ...headers,
      },
      body: new URLSearchParams(fields).toString(),
    });
    return { status: res.status, text: await res.text(), res };
  }
}

/** The hidden fields of the first form in `html` that has a `confirm` field. */
function confirmFields(html: string): [string, string][] {
  const form = /<form[^>]*>(?:(?!<\/form>).)*name="confirm"(?:(?!<\/form>).)*<\/form>/s.exec(html)?.[0] ?? '';
  return [...form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((m) => [
    unescape(m[1] ?? ''),
    unescape(m[2] ?? ''),
  ]);
}

/** Starts a replay, follows it to its job page and waits until every record was sent back or refused. */
async function replay(client: Client, bus: TestBus, fields: [string, string][]): Promise<string> {
  const started = await client.post('/actions/replay', [['csrf', await client.token()], ...fields]);
  expect(started.status).toBe(303);
  const location = started.res.headers.get('location') ?? '';
  expect(location).toMatch(/^\/replays\/[0-9a-f-]{36}$/);
  await waitFor(
    'the replay to finish',
    async () => {
      await bus.whenIdle();
      return (await client.get(location)).text.includes('; finished.');
    },
    { timeoutMs: 10_000, explain: async () => (await client.get(location)).text },
  );
  await bus.whenIdle();
  return location;
}

function count(html: string, state: string): number {
  const match = new RegExp(`data-testid="count-${state}"><strong>(\\d+)</strong>`).exec(html);
  return Number(match?.[1] ?? Number.NaN);
}

describe('createDashboard actions', () => {
  describe('when started without allowActions', () => {
    it('renders no forms and refuses every POST, changing nothing', async () => {
      const { bus, records } = await busWithDeadLetters(2);
      await serve(bus, { allowActions: false });
      const client = new Client(served?.url ?? '');
      for (const path of ['/', '/groups', `/records/${records[0]?.id ?? ''}`]) {
        const { status, text, res } = await client.get(path);
        expect(status).toBe(200);
        expect(text).not.toContain('method="post"');
        expect(text).not.toContain('type="checkbox"');
        expect(text).toContain('read-only');
        expect(res.headers.get('set-cookie')).toBeNull();
      }
      client.cookie = `${CSRF_COOKIE}=x`;
      const purge = await client.post('/actions/purge', [
        ['csrf', 'x'],
        ['id', records[0]?.id ?? ''],
        ['confirm', 'yes'],
      ]);
      expect(purge.status).toBe(403);
      expect(purge.text).toContain('started without --allow-actions');
      const replayed = await client.post('/actions/replay', [
        ['csrf', 'x'],
        ['id', records[0]?.id ?? ''],
      ]);
      expect(replayed.status).toBe(403);
      expect(await bus.deadLetters.count()).toBe(2);
      expect((await bus.deadLetters.get(records[0]?.id ?? ''))?.replays).toEqual([]);
    });
  });

  describe('the CSRF token', () => {
    it('is set as an HttpOnly SameSite=Strict cookie and put in every form', async () => {
      const { bus, records } = await busWithDeadLetters(1);
      await serve(bus);
      const res = await fetch(`${served?.url ?? ''}/`);
      const cookie = res.headers.get('set-cookie') ?? '';
      expect(cookie).toMatch(
        new RegExp(`^${CSRF_COOKIE}=[\\w-]+\\.[\\w-]+; HttpOnly; SameSite=Strict; Path=/$`),
      );
      const token = cookie.split(';')[0]?.split('=')[1] ?? '';
      const client = new Client(served?.url ?? '');
      client.cookie = `${CSRF_COOKIE}=${token}`;
      for (const path of ['/', '/groups', `/records/${records[0]?.id ?? ''}`]) {
        const { text, res: again } = await client.get(path);
        expect(text).toContain(`name="csrf" value="${token}"`);
        // A browser that holds a valid token keeps it.
        expect(again.headers.get('set-cookie')).toBeNull();
      }
    });

    it.each([
      ['no cookie and no field', (c: Client) => ((c.cookie = ''), [])],
      ['a cookie but no field', () => []],
      ['a field that differs from the cookie', () => [['csrf', 'forged.value']]],
      [
        'a matching pair this dashboard never issued',
        (c: Client) => ((c.cookie = `${CSRF_COOKIE}=planted.mac`), [['csrf', 'planted.mac']]),
      ],
    ] as [string, (c: Client) => [string, string][]][])(
      'refuses a POST with %s (403) and deletes nothing',
      async (_, tamper) => {
        const { bus, records } = await busWithDeadLetters(1);
        await serve(bus);
        const client = new Client(served?.url ?? '');
        await client.token();
        const fields = tamper(client);
        const res = await client.post('/actions/purge', [
          ...fields,
          ['id', records[0]?.id ?? ''],
          ['confirm', 'yes'],
        ]);
        expect(res.status).toBe(403);
        expect(res.text).toContain('CSRF token');
        expect(await bus.deadLetters.count()).toBe(1);
      },
    );
  });

  describe('the cross-site check', () => {
    it.each<[string, Record<string, string>, string]>([
      ['a foreign Origin', { origin: 'http://evil.example' }, 'is not this dashboard'],
      ['Origin null', { origin: 'null' }, 'is not a URL of this dashboard'],
      ['Sec-Fetch-Site: cross-site', { 'sec-fetch-site': 'cross-site' }, 'Sec-Fetch-Site: cross-site'],
      ['Sec-Fetch-Site: same-site', { 'sec-fetch-site': 'same-site' }, 'Sec-Fetch-Site: same-site'],
      ['a foreign Referer and no Origin', { origin: '', referer: 'http://evil.example/x' }, 'Referer'],
    ])('refuses %s with 403 and deletes nothing', async (_, headers, why) => {
      const { bus, records } = await busWithDeadLetters(1);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const token = await client.token();
      const sent = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== ''));
      const res = await fetch(`${served?.url ?? ''}/actions/purge`, {
        method: 'POST',
        redirect: 'manual',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          cookie: client.cookie,
          ...('origin' in sent || headers.origin === '' ? {} : { origin: client.base }),
          ...sent,
        },
        body: new URLSearchParams([
          ['csrf', token],
          ['id', records[0]?.id ?? ''],
          ['confirm', 'yes'],
        ]).toString(),
      });
      const text = await res.text();
      expect(res.status).toBe(403);
      expect(text).toContain(why);
      expect(await bus.deadLetters.count()).toBe(1);
    });

    it('refuses a POST with neither Origin nor Referer, and takes a same-origin Referer', async () => {
      const { bus, records } = await busWithDeadLetters(1);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const token = await client.token();
      const send = (headers: Record<string, string>) =>
        fetch(`${client.base}/actions/purge`, {
          method: 'POST',
          redirect: 'manual',
          headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: client.cookie, ...headers },
          body: new URLSearchParams([
            ['csrf', token],
            ['id', records[0]?.id ?? ''],
          ]).toString(),
        });
      const bare = await send({});
      expect(bare.status).toBe(403);
      expect(await bare.text()).toContain('neither Origin nor Referer');
      const referred = await send({ referer: `${client.base}/records/x`, 'sec-fetch-site': 'same-origin' });
      expect(referred.status).toBe(200);
      expect(await referred.text()).toContain('Purge 1 dead letter?');
    });

    it('applies the token gate to POST too', async () => {
      const { bus, records } = await busWithDeadLetters(1);
      await serve(bus, { token: 's3cret-s3cret-s3cret' });
      const client = new Client(served?.url ?? '');
      const res = await client.post('/actions/purge', [
        ['id', records[0]?.id ?? ''],
        ['confirm', 'yes'],
      ]);
      expect(res.status).toBe(401);
      expect(await bus.deadLetters.count()).toBe(1);
    });

    it('answers 413 to a form over 1 MB, 415 to a body that is not a form', async () => {
      const { bus } = await busWithDeadLetters(1);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const token = await client.token();
      const big = await client.post('/actions/purge', [
        ['csrf', token],
        ['id', 'x'.repeat(1024 * 1024 + 1)],
      ]);
      expect(big.status).toBe(413);
      const json = await fetch(`${client.base}/actions/purge`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', origin: client.base, cookie: client.cookie },
        body: JSON.stringify({ csrf: token }),
      });
      expect(json.status).toBe(415);
      expect(await bus.deadLetters.count()).toBe(1);
    });
  });

  describe('replay', () => {
    it('replays one record from its page; the job page shows it handled', async () => {
      const { bus, state, idOf } = await busWithDeadLetters(2);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const id = idOf('o-1');
      const record = await client.get(`/records/${id}`);
      expect(record.text).toContain('data-action="replay"');
      state.failing = false;
      const job = await replay(client, bus, [['id', id]]);
      expect(state.handled).toEqual(['o-1']);
      const after = await bus.deadLetters.get(id);
      expect(after?.status).toBe('replayed');
      expect(after?.replays.map((r) => r.by)).toEqual(['dashboard']);
      expect((await bus.deadLetters.get(idOf('o-0')))?.status).toBe('dead');
      // Needs the dispatcher to record handled replays (branch outcome).
      await waitFor('the outcome handled', async () => count((await client.get(job)).text, 'handled') === 1, {
        timeoutMs: 5_000,
        explain: async () => (await client.get(job)).text,
      });
      const page = (await client.get(job)).text;
      expect(page).toContain('<span data-testid="progress">1/1</span>');
      expect(page).toContain(`<tr data-state="handled"><td><a href="/records/${id}">`);
      expect(page).not.toContain('http-equiv="refresh"');
    });

    it('replays a selection of the list and nothing else', async () => {
      const { bus, state, idOf } = await busWithDeadLetters(3);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const list = await client.get('/');
      expect(list.text.match(/type="checkbox" form="selection" name="id"/g)).toHaveLength(3);
      expect(list.text).toContain('Replay selected');
      expect(list.text).toContain('Purge selected');
      state.failing = false;
      const job = await replay(client, bus, [
        ['id', idOf('o-0')],
        ['id', idOf('o-2')],
      ]);
      expect(state.handled.sort()).toEqual(['o-0', 'o-2']);
      expect((await bus.deadLetters.get(idOf('o-1')))?.status).toBe('dead');
      const page = (await client.get(job)).text;
      expect(page).toContain('<span data-testid="progress">2/2</span>');
      expect(page.match(/<tr data-state=/g)).toHaveLength(2);
    });

    it('replays a whole group, resolved on the server, and shows them failed again while the fault lasts', async () => {
      const { bus, state, idOf } = await busWithDeadLetters(3, 2);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const charge = await bus.deadLetters.get(idOf('c-0'));
      const groups = await client.get('/groups');
      expect(groups.text.match(/Replay group/g)).toHaveLength(2);
      expect(groups.text).toContain(`name="fingerprint" value="${charge?.fingerprint ?? ''}"`);
      const job = await replay(client, bus, [
        ['scope', 'filter'],
        ['fingerprint', charge?.fingerprint ?? ''],
        ['status', 'dead'],
      ]);
      const page = (await client.get(job)).text;
      expect(page).toContain(
        `Replay of dead letters where fingerprint = ${charge?.fingerprint ?? ''}, status = dead`,
      );
      expect(page).toContain('<span data-testid="progress">2/2</span>');
      expect(count(page, 'failed-again')).toBe(2);
      expect(count(page, 'pending')).toBe(0);
      expect(state.handled).toEqual([]);
      for (const orderId of ['o-0', 'o-1', 'o-2']) {
        expect((await bus.deadLetters.get(idOf(orderId)))?.replays).toEqual([]);
      }
    });

    it('counts refusals with their code and message on the job page', async () => {
      const { bus, state, idOf } = await busWithDeadLetters(2);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      state.failing = false;
      await replay(client, bus, [['id', idOf('o-0')]]);
      const job = await replay(client, bus, [
        ['id', idOf('o-0')],
        ['id', idOf('o-1')],
        ['id', 'no-such-record'],
      ]);
      const page = (await client.get(job)).text;
      expect(page).toContain('<span data-testid="progress">3/3</span>');
      expect(count(page, 'refused')).toBe(1);
      expect(count(page, 'skipped')).toBe(1);
      expect(page).toMatch(/<td><code>not-found<\/code><\/td><td>[^<]*no-such-record/);
      expect(page).toContain('<tr data-state="skipped">');
      expect(state.handled.sort()).toEqual(['o-0', 'o-1']);
    });

    it('refreshes the job page while a replayed message has no outcome', async () => {
      const { bus, idOf } = await busWithDeadLetters(1);
      let release: () => void = () => undefined;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      await serve(bus, {
        replay: async (ids, o) => {
          await held;
          return bus.replayDeadLetters(ids, o);
        },
      });
      const client = new Client(served?.url ?? '');
      const started = await client.post('/actions/replay', [
        ['csrf', await client.token()],
        ['id', idOf('o-0')],
      ]);
      const location = started.res.headers.get('location') ?? '';
      const running = (await client.get(location)).text;
      expect(running).toContain('<meta http-equiv="refresh" content="1">');
      expect(running).toContain('<span data-testid="progress">0/1</span>');
      expect(running).toContain('<tr data-state="queued">');
      release();
      await waitFor(
        'the replay to fail again',
        async () => {
          await bus.whenIdle();
          return count((await client.get(location)).text, 'failed-again') === 1;
        },
        { timeoutMs: 5_000 },
      );
      expect((await client.get(location)).text).not.toContain('http-equiv="refresh"');
    });

    it('without a replay function shows no replay buttons, says what to pass, and refuses replays', async () => {
      const { bus, records } = await busWithDeadLetters(1);
      served = await serveDashboard({ deadLetters: bus.deadLetters, allowActions: true });
      const client = new Client(served.url);
      for (const path of ['/', '/groups', `/records/${records[0]?.id ?? ''}`]) {
        const { text } = await client.get(path);
        expect(text).not.toContain('data-action="replay"');
        expect(text).toContain('data-action="purge"');
        expect(text).toContain('replay: (ids, o) =&gt; bus.replayDeadLetters(ids, o)');
      }
      const res = await client.post('/actions/replay', [
        ['csrf', await client.token()],
        ['id', records[0]?.id ?? ''],
      ]);
      expect(res.status).toBe(403);
      expect((await bus.deadLetters.get(records[0]?.id ?? ''))?.status).toBe('dead');
    });

    it('refuses a selection over 10,000 records without starting a replay', async () => {
      const store = new InMemoryDeadLetterStore();
      for (let n = 0; n <= MAX_REPLAY_RECORDS; n += 1) await store.add(deadLetter(n, { id: `dl-${n}` }));
      let calls = 0;
      served = await serveDashboard({
        deadLetters: store,
        allowActions: true,
        replay: () => {
          calls += 1;
          return Promise.resolve([]);
        },
      });
      const client = new Client(served.url);
      const res = await client.post('/actions/replay', [
        ['csrf', await client.token()],
        ['scope', 'filter'],
        ['fingerprint', 'fp-orders'],
      ]);
      expect(res.status).toBe(400);
      expect(res.text).toContain('More than 10000 records match dead letters where fingerprint = fp-orders');
      expect(calls).toBe(0);
    });

    it('answers 404 for a job it does not keep', async () => {
      const { bus } = await busWithDeadLetters(0);
      await serve(bus);
      const res = await new Client(served?.url ?? '').get('/replays/5b1c0f52-0000-4000-8000-000000000000');
      expect(res.status).toBe(404);
      expect(res.text).toContain('gone when it restarts');
    });
  });

  describe('purge', () => {
    it('asks to confirm a selection, then deletes exactly it', async () => {
      const { bus, idOf } = await busWithDeadLetters(3);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const asked = await client.post('/actions/purge', [
        ['csrf', await client.token()],
        ['id', idOf('o-0')],
        ['id', idOf('o-2')],
      ]);
      expect(asked.status).toBe(200);
      expect(asked.text).toContain('Purge 2 dead letters?');
      expect(asked.text).toContain(`<code>${idOf('o-2')}</code></a> dash.PlaceOrder in`);
      expect(asked.text).not.toContain(`<code>${idOf('o-1')}</code>`);
      expect(asked.text).toContain('>Cancel</a>');
      expect(await bus.deadLetters.count()).toBe(3);
      const done = await client.post('/actions/purge', confirmFields(asked.text));
      expect(done.status).toBe(200);
      expect(done.text).toContain('Purged 2 dead letters');
      expect(await bus.deadLetters.count()).toBe(1);
      expect(await bus.deadLetters.get(idOf('o-1'))).toBeDefined();
    });

    it('purges a group after confirmation and leaves the other group', async () => {
      const { bus, idOf } = await busWithDeadLetters(2, 3);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const fingerprint = (await bus.deadLetters.get(idOf('c-0')))?.fingerprint ?? '';
      const asked = await client.post('/actions/purge', [
        ['csrf', await client.token()],
        ['scope', 'filter'],
        ['fingerprint', fingerprint],
        ['status', 'dead'],
      ]);
      expect(asked.text).toContain('Purge 3 dead letters?');
      expect(await bus.deadLetters.count()).toBe(5);
      const done = await client.post('/actions/purge', confirmFields(asked.text));
      expect(done.text).toContain('Purged 3 dead letters');
      expect(await bus.deadLetters.count({ fingerprint })).toBe(0);
      expect(await bus.deadLetters.count()).toBe(2);
    });

    it('answers 400 when nothing is selected', async () => {
      const { bus } = await busWithDeadLetters(1);
      await serve(bus);
      const client = new Client(served?.url ?? '');
      const res = await client.post('/actions/purge', [['csrf', await client.token()]]);
      expect(res.status).toBe(400);
      expect(res.text).toContain('Select at least one dead letter');
      expect(await bus.deadLetters.count()).toBe(1);
    });
  });
});
