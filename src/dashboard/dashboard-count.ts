import type { DeadLetterFilter, DeadLetterPage, DeadLetterStore } from '../dead-letters/dead-letter-store.js';

/** How many records a search counts at most, in pages of this size. */
export const SEARCH_COUNT_PAGE = 500;
/** Pages a search counts before it stops. */
export const SEARCH_COUNT_PAGES = 2;

/** The "N matching" line of the list page: exact, or a lower bound when counting stopped. */
export interface MatchCount {
  readonly n: number;
  /** False when counting stopped before the end: at least `n` records match. */
  readonly complete: boolean;
}

/**
 * How many records the list page's filter selects.
 *
 * @remarks
 * Without `text`, the store's `count`: on Redis it is answered from aggregates or filtered inside
 * Redis, well under a second at 100,000 records. With `text` an exact count must read every record
 * (on Redis about 1 s at 100,000 when few match, 4 s when all do), so the page counts only what the
 * first {@link SEARCH_COUNT_PAGES} pages of {@link SEARCH_COUNT_PAGE} find, through `list`, which
 * every store bounds, and shows "N+" when there is more to search. A dashboard choice, not a store
 * one: the store contract stays one exact `count`.
 */
export async function countMatches(store: DeadLetterStore, filter: DeadLetterFilter): Promise<MatchCount> {
  if (filter.text === undefined) return { n: await store.count(filter), complete: true };
  let n = 0;
  let cursor: string | undefined;
  for (let pages = 0; pages < SEARCH_COUNT_PAGES; pages++) {
    const page = await store.list(
      filter,
      cursor === undefined ? { limit: SEARCH_COUNT_PAGE } : { limit: SEARCH_COUNT_PAGE, cursor },
    );
    n += page.records.length;
    cursor = page.next;
    if (cursor === undefined) return { n, complete: true };
  }
  return { n, complete: false };
}

/**
 * The count to show beside `page`, one page of the same filter's list: never fewer than the page
 * shows.
 *
 * @remarks
 * A search's count reads the first pages of the list, and a store may end a search page after a
 * bounded number of records read (RedisDeadLetterStore: 10,000), so the count can stop before a match
 * that a later page, reached through `More`, shows. That page's matches are then a better lower bound.
 * A page that starts at the beginning and ends the list holds every match, so its length is exact.
 *
 * @param fromStart - whether `page` was read without a cursor.
 */
export function countBeside(count: MatchCount, page: DeadLetterPage, fromStart: boolean): MatchCount {
  const shown = page.records.length;
  if (fromStart && page.next === undefined) return { n: shown, complete: true };
  // Also when the count was exact: a page with more means records were added since, so "at least".
  return count.n >= shown ? count : { n: shown, complete: false };
}
