import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { deadLetter, serveDashboard, unescape, type ServedDashboard } from '../helpers/dashboard.js';

let served: ServedDashboard | undefined;
afterEach(async () => {
  await served?.close();
  served = undefined;
});

interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
}

/** A raw HTTP request, so the Host header can be what a DNS-rebinding page's browser sends. */
function raw(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body = '',
): Promise<Reply> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text: Buffer.concat(chunks).toString('utf8'),
          });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('createDashboard actions: hosts, group status and confirmed counts', () => {
  describe('when a page on another host name reaches the loopback dashboard (DNS rebinding)', () => {
    it('refuses a request whose Host is not the dashboard’s own address', async () => {
      const store = new InMemoryDeadLetterStore();
      await store.add(deadLetter(1));
      await store.add(deadLetter(2));
      served = await serveDashboard({ deadLetters: store, allowActions: true });
      const port = new URL(served.url).port;
      // attacker.example resolves to 127.0.0.1 after rebinding: the browser sends its own name as
      // Host and Origin, Sec-Fetch-Site is same-origin, and the page can read the form's token.
      const host = `attacker.example:${port}`;
      const page = await raw(served.url, 'GET', '/', { host, 'sec-fetch-site': 'same-origin' });
      expect(page.status).toBe(403);
      expect(page.text).not.toContain('dl-0001');
      expect(page.headers['set-cookie']).toBeUndefined();
      const purge = await raw(
        served.url,
        'POST',
        '/actions/purge',
        {
          host,
          origin: `http://${host}`,
          'sec-fetch-site': 'same-origin',
          'content-type': 'application/x-www-form-urlencoded',
        },
        new URLSearchParams([
          ['scope', 'filter'],
          ['confirm', 'yes'],
          ['count', '2'],
        ]).toString(),
      );
      expect(purge.status).toBe(403);
      expect(await store.count({ status: 'any' })).toBe(2);
    });

    it('answers to loopback names, its own host and allowedHosts; any name once it has a token', async () => {
      const store = new InMemoryDeadLetterStore();
      served = await serveDashboard({ deadLetters: store, allowedHosts: ['dash.internal'] });
      const port = new URL(served.url).port;
      const status = async (host: string, headers: Record<string, string> = {}): Promise<number> =>
        (await raw(served!.url, 'GET', '/', { host, ...headers })).status;
      expect(await status(`127.0.0.1:${port}`)).toBe(200);
      expect(await status(`localhost:${port}`)).toBe(200);
      expect(await status(`[::1]:${port}`)).toBe(200);
      expect(await status(`dash.internal:${port}`)).toBe(200);
      expect(await status(`DASH.internal`)).toBe(200);
      expect(await status(`evil.example:${port}`)).toBe(403);
      await served.close();
      served = await serveDashboard({ deadLetters: store, token: 's3cret-s3cret-s3cret' });
      expect(await status(`evil.example:${port}`, { 'x-harrier-token': 's3cret-s3cret-s3cret' })).toBe(200);
    });
  });

  /** GETs `path` as the dashboard's own browser and returns the page and CSRF cookie. */
  async function own(path: string): Promise<{ text: string; cookie: string }> {
    const res = await raw(served!.url, 'GET', path, {});
    const cookie = String(res.headers['set-cookie'] ?? '').split(';')[0] ?? '';
    return { text: res.text, cookie };
  }

  /** The hidden fields of the first form in `html` (after `from`). */
  function formFields(html: string, from = 0): [string, string][] {
    const form = /<form[^>]*>(.*?)<\/form>/s.exec(html.slice(from))?.[1] ?? '';
    return [...form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((m) => [
      unescape(m[1] ?? ''),
      unescape(m[2] ?? ''),
    ]);
  }

  async function post(path: string, cookie: string, fields: [string, string][]): Promise<Reply> {
    const origin = served!.url;
    return raw(
      origin,
      'POST',
      path,
      { origin, cookie, 'content-type': 'application/x-www-form-urlencoded' },
      new URLSearchParams(fields).toString(),
    );
  }

  describe('the group buttons on a groups page filtered by status', () => {
    it('purge the records the row counts, not the dead ones of its fingerprint', async () => {
      const store = new InMemoryDeadLetterStore();
      await store.add(deadLetter(1)); // stays dead
      await store.add(deadLetter(2));
      await store.markReplayed('dl-0002', { at: Date.UTC(2026, 1, 1) });
      served = await serveDashboard({ deadLetters: store, allowActions: true });
      // The operator looks at the replayed records' groups: one row, count 1 (dl-0002).
      const { text, cookie } = await own('/groups?status=replayed');
      const rowForm = text.indexOf('<form class="actions"');
      expect(rowForm).toBeGreaterThan(0);
      const fields = formFields(text, rowForm);
      const asked = await post('/actions/purge', cookie, fields);
      // "Purge 1": the replayed record the row counts.
      expect(asked.text).toContain('Purge 1 dead letter?');
      const confirmForm = asked.text.indexOf('name="confirm"');
      const confirm = formFields(asked.text, asked.text.lastIndexOf('<form', confirmForm));
      await post('/actions/purge', cookie, confirm);
      // The replayed record (the row) is gone, the dead one kept.
      expect((await store.get('dl-0001'))?.id).toBe('dl-0001');
      expect(await store.get('dl-0002')).toBeUndefined();
    });
  });

  describe('a confirmed purge of a group', () => {
    it('deletes no more records than the confirmation page counted', async () => {
      const store = new InMemoryDeadLetterStore();
      await store.add(deadLetter(1));
      served = await serveDashboard({ deadLetters: store, allowActions: true });
      const { text, cookie } = await own('/groups');
      const fields = formFields(text, text.indexOf('<form class="actions"'));
      const asked = await post('/actions/purge', cookie, fields);
      expect(asked.text).toContain('Purge 1 dead letter?');
      const confirm = formFields(
        asked.text,
        asked.text.lastIndexOf('<form', asked.text.indexOf('name="confirm"')),
      );
      // While the operator reads "Purge 1", two more messages of the group fail.
      await store.add(deadLetter(2));
      await store.add(deadLetter(3));
      const done = await post('/actions/purge', cookie, confirm);
      // The button said "Purge 1": the two that failed since are kept.
      expect(done.text).toContain('Purged 1 dead letter');
      expect(await store.count({})).toBe(2);
    });
  });
});
