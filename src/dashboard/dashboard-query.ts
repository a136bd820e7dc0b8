import { durationMs } from '../clock/duration.js';
import type { DeadLetterFilter, DeadLetterStatus } from '../dead-letters/dead-letter-store.js';

/** The text filters of the list page, by query parameter name. */
export const TEXT_FILTERS = ['endpoint', 'handler', 'type', 'reason', 'fingerprint'] as const;

/** The list page's query, parsed: the store's filter and paging, or why the query is wrong. */
export interface ListQuery {
  readonly filter: DeadLetterFilter;
  readonly limit: number;
  readonly cursor: string | undefined;
  /** The filter parameters as given (non-empty ones), to refill the form and build page links. */
  readonly params: ReadonlyMap<string, string>;
  /** Messages for parameters that could not be used; the list is not read when there are any. */
  readonly problems: readonly string[];
}

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 500;

/** A time window bound: an ISO date (UTC unless it names a zone) or a duration before `now`. */
function parseWhen(text: string, now: number): number | undefined {
  const duration = durationMs(text);
  if (duration !== undefined) return now - duration;
  if (!/^\d{4}-\d{2}-\d{2}/.test(text)) return undefined;
  // A date-time without a zone (as a datetime-local input sends it) is read as UTC, not server time.
  const zoned = /T\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/.test(text) ? `${text}Z` : text;
  const ms = Date.parse(zoned);
  return Number.isNaN(ms) ? undefined : ms;
}

/** Parses the list page's query parameters. */
export function parseListQuery(search: URLSearchParams, now: number): ListQuery {
  const params = new Map<string, string>();
  const problems: string[] = [];
  const filter: { -readonly [K in keyof DeadLetterFilter]: DeadLetterFilter[K] } = {};
  for (const name of TEXT_FILTERS) {
    const value = search.get(name)?.trim() ?? '';
    if (value === '') continue;
    params.set(name, value);
    filter[name] = value;
  }
  // The search box: error message, stack and envelope (payload), case-insensitive.
  const text = search.get('text')?.trim() ?? '';
  if (text !== '') {
    params.set('text', text);
    filter.text = text;
  }
  for (const name of ['since', 'until'] as const) {
    const value = search.get(name)?.trim() ?? '';
    if (value === '') continue;
    params.set(name, value);
    const ms = parseWhen(value, now);
    if (ms === undefined) {
      problems.push(
        `${name} "${value}" is neither an ISO date (2026-01-31, 2026-01-31T12:00Z) nor a duration (90s, 15m, 1h, 2d, 1w)`,
      );
    } else {
      filter[name] = ms;
    }
  }
  const status = search.get('status')?.trim() ?? '';
  if (status !== '') {
    params.set('status', status);
    if (status === 'dead' || status === 'replayed' || status === 'any') {
      filter.status = status satisfies DeadLetterStatus | 'any';
    } else {
      problems.push(`status "${status}" is not one of dead, replayed, any`);
    }
  }
  let limit = DEFAULT_LIMIT;
  const limitText = search.get('limit')?.trim() ?? '';
  if (limitText !== '') {
    params.set('limit', limitText);
    const n = /^\d+$/.test(limitText) ? Number(limitText) : Number.NaN;
    if (n >= 1 && n <= MAX_LIMIT) limit = n;
    else problems.push(`limit "${limitText}" is not a whole number from 1 to ${MAX_LIMIT}`);
  }
  const cursor = search.get('cursor') ?? undefined;
  return { filter, limit, cursor: cursor === '' ? undefined : cursor, params, problems };
}

/** The URL of the page at `path` for `params` plus `extra` (e.g. a cursor); `extra` wins over `params`. */
export function pageHref(
  path: '/' | '/groups',
  params: ReadonlyMap<string, string>,
  extra: Record<string, string> = {},
): string {
  const search = new URLSearchParams([...new Map([...params, ...Object.entries(extra)])]);
  const text = search.toString();
  return text === '' ? path : `${path}?${text}`;
}

/** The list page's URL for `params` plus `extra` (e.g. a cursor). */
export function listHref(params: ReadonlyMap<string, string>, extra: Record<string, string> = {}): string {
  return pageHref('/', params, extra);
}
