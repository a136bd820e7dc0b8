import { afterEach, describe, expect, it } from 'vitest';
import { SEARCH_COUNT_PAGE, SEARCH_COUNT_PAGES } from '../../src/dashboard/dashboard-count.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { deadLetter, serveDashboard, type ServedDashboard } from '../helpers/dashboard.js';

let served: ServedDashboard | undefined;

afterEach(async () => {
  await served?.close();
  served = undefined;
});

/** The "N matching" line of the list page at `path`. */
async function totalOf(path: string): Promise<string | undefined> {
  if (served === undefined) throw new Error('no dashboard served');
  const text = await (await fetch(`${served.url}${path}`)).text();
  return /data-testid="total">([^<]*)</.exec(text)?.[1];
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
