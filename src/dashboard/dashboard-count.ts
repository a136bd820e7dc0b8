import type { DeadLetterFilter, DeadLetterStore } from '../dead-letters/dead-letter-store.js';

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
