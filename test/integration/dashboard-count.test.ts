import { afterEach, describe, expect, inject, it } from 'vitest';
import { SEARCH_COUNT_PAGE, SEARCH_COUNT_PAGES } from '../../src/dashboard/dashboard-count.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { deadLetter, serveDashboard, unescape, type ServedDashboard } from '../helpers/dashboard.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redis = useSharedRedis(inject('redisUrl'));

let served: ServedDashboard | undefined;

afterEach(async () => {
  await served?.close();
  served = undefined;
});

/** The list page at `path`: its "N matching" line, the ids it shows and its link to the next page. */
async function listPage(
  path: string,
): Promise<{ total: string | undefined; ids: string[]; next: string | undefined }> {
  if (served === undefined) throw new Error('no dashboard served');
  const text = await (await fetch(`${served.url}${path}`)).text();
  const next = /<a rel="next" href="([^"]+)"/.exec(text)?.[1];
  return {
    total: /data-testid="total">([^<]*)</.exec(text)?.[1],
    ids: [...text.matchAll(/href="\/records\/([^"]+)"/g)].map((m) => decodeURIComponent(m[1] ?? '')),
    next: next === undefined ? undefined : unescape(next),
  };
}

/** The "N matching" line of the list page at `path`. */
async function totalOf(path: string): Promise<string | undefined> {
  return (await listPage(path)).total;
}

describe('createDashboard: the list page count', () => {
  const most = SEARCH_COUNT_PAGE * SEARCH_COUNT_PAGES;

  describe('when a search matches more records than it counts', () => {
    it(`shows ${most}+ instead of reading every record, and exact counts without text`, async () => {
      const store = new InMemoryDeadLetterStore();
      for (let n = 0; n < most + 200; n++) await store.add(deadLetter(n, { endpoint: 'orders' }));
      served = await serveDashboard({ deadLetters: store });
      expect(await totalOf('/?text=failure')).toBe(
        `${most}+ matching (a search stops counting there; page on to search further)`,
      );
      expect(await totalOf('/?endpoint=orders')).toBe(`${most + 200} matching`);
    });
  });

  describe('when a search ends within what it counts', () => {
    it('shows the exact count', async () => {
      const store = new InMemoryDeadLetterStore();
      for (let n = 0; n < most; n++) await store.add(deadLetter(n));
      served = await serveDashboard({ deadLetters: store });
      expect(await totalOf('/?text=failure')).toBe(`${most} matching`);
      expect(await totalOf('/?text=%22o-7%22')).toBe('1 matching');
    });
  });
});

describe('createDashboard: the list page count on Redis', () => {
  describe('when a search finds its one match past the records its count reads', () => {
    it('shows at least the match on the page that shows it, and N+ only while it stops early', async () => {
      const records = 30_000;
      const at = 25_000;
      const needle = 'needle-in-the-haystack';
      const prefix = freshPrefix();
      const store = new RedisDeadLetterStore({ connection: inject('redisUrl'), prefix });
      try {
        let next = 0;
        const fill = async (): Promise<void> => {
          while (next < records) {
            const n = next++;
            await store.add(
              deadLetter(n, n === at ? { error: { name: 'Error', message: `${needle} ${n}` } } : {}),
            );
          }
        };
        await Promise.all(Array.from({ length: 32 }, fill));
        served = await serveDashboard({ deadLetters: store });

        const pages: { total: string | undefined; ids: string[] }[] = [];
        let path: string | undefined = `/?text=${needle}`;
        while (path !== undefined) {
          const page = await listPage(path);
          pages.push(page);
          path = page.next;
        }
        // The store ends a search page after 10,000 records read, so the match is on a later page.
        const showing = pages.findIndex((page) => page.ids.includes(deadLetter(at).id));
        expect(showing).toBeGreaterThan(0);
        expect(pages.flatMap((page) => page.ids)).toEqual([deadLetter(at).id]);
        expect(pages[0]?.total).toBe(
          '0+ matching (a search stops counting there; page on to search further)',
        );
        expect(pages[showing]?.total).toBe(
          '1+ matching (a search stops counting there; page on to search further)',
        );
      } finally {
        await store.close();
        await deleteKeys(redis.client, prefix);
      }
    });
  });
});
