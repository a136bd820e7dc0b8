import { HarrierError } from '../errors/harrier-error.js';
import type {
  DeadLetterFilter,
  DeadLetterGroup,
  DeadLetterGroupPage,
  DeadLetterGroupPageOptions,
  DeadLetterRecord,
  DeadLetterStore,
} from './dead-letter-store.js';

/** Groups per page when the caller gives no limit. */
export const DEFAULT_GROUP_PAGE_LIMIT = 50;
const CURSOR_PREFIX = 'dlg1:';
/** Records per page while the fallback of {@link deadLetterGroups} reads a store. */
const FALLBACK_PAGE = 500;

/** Where a page of groups starts: after the group with this lastSeen and fingerprint. */
export interface GroupCursor {
  readonly lastSeen: number;
  readonly fingerprint: string;
}

/** The cursor of the page that starts after `group`. */
export function encodeGroupCursor(group: GroupCursor): string {
  return Buffer.from(`${CURSOR_PREFIX}${group.lastSeen}:${group.fingerprint}`, 'utf8').toString('base64url');
}

/** @throws HarrierError `invalid-cursor` for a cursor {@link encodeGroupCursor} did not make. */
export function decodeGroupCursor(cursor: string): GroupCursor {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = text.startsWith(CURSOR_PREFIX)
    ? /^(-?\d+):(.*)$/s.exec(text.slice(CURSOR_PREFIX.length))
    : null;
  const lastSeen = Number(match?.[1]);
  if (match === null || !Number.isSafeInteger(lastSeen)) {
    throw new HarrierError(
      'invalid-cursor',
      `Dead-letter group cursor "${cursor}" was not issued by this store: pass the \`next\` of the previous page, or no cursor to start from the first page`,
    );
  }
  return { lastSeen, fingerprint: match[2] ?? '' };
}

/** The page limit asked for, checked. @throws HarrierError `invalid-argument` when not a positive integer. */
export function groupPageLimit(page: DeadLetterGroupPageOptions): number {
  const limit = page.limit ?? DEFAULT_GROUP_PAGE_LIMIT;
  if (!Number.isInteger(limit) || limit < 1) {
    throw new HarrierError(
      'invalid-argument',
      `Dead-letter group page limit must be a positive integer, got ${limit}: pass a whole number such as 50, or leave it out for the default`,
    );
  }
  return limit;
}

/** Whether `group` sorts after `cursor` in groups order (lastSeen descending, then fingerprint descending). */
export function comesAfter(group: GroupCursor, cursor: GroupCursor): boolean {
  return (
    group.lastSeen < cursor.lastSeen ||
    (group.lastSeen === cursor.lastSeen && group.fingerprint < cursor.fingerprint)
  );
}

/** Groups order: lastSeen descending, then fingerprint descending. */
function byLastSeen(a: GroupCursor, b: GroupCursor): number {
  if (a.lastSeen !== b.lastSeen) return b.lastSeen - a.lastSeen;
  return a.fingerprint < b.fingerprint ? 1 : a.fingerprint > b.fingerprint ? -1 : 0;
}

interface Aggregate {
  count: number;
  firstSeen: number;
  lastSeen: number;
  sample: DeadLetterRecord;
  sampleRank: number;
}

/**
 * Folds records into failure groups and pages them, for stores that compute groups from their
 * records (the in-memory store, and the fallback of {@link deadLetterGroups}).
 */
export class DeadLetterGroupAccumulator {
  readonly #groups = new Map<string, Aggregate>();

  /** Counts `record` in its group; of a group's records, the one of highest `rank` is its sample. */
  add(record: DeadLetterRecord, rank: number): void {
    const group = this.#groups.get(record.fingerprint);
    if (group === undefined) {
      this.#groups.set(record.fingerprint, {
        count: 1,
        firstSeen: record.firstFailedAt,
        lastSeen: record.lastFailedAt,
        sample: record,
        sampleRank: rank,
      });
      return;
    }
    group.count++;
    group.firstSeen = Math.min(group.firstSeen, record.firstFailedAt);
    group.lastSeen = Math.max(group.lastSeen, record.lastFailedAt);
    if (rank >= group.sampleRank) {
      group.sample = record;
      group.sampleRank = rank;
    }
  }

  /** One page of the groups, in groups order. */
  page(options: DeadLetterGroupPageOptions): DeadLetterGroupPage {
    const limit = groupPageLimit(options);
    const after = options.cursor === undefined ? undefined : decodeGroupCursor(options.cursor);
    const all = [...this.#groups].map(([fingerprint, group]) => groupOf(fingerprint, group));
    const selected = all.filter((group) => after === undefined || comesAfter(group, after)).sort(byLastSeen);
    const groups = selected.slice(0, limit);
    const last = groups.at(-1);
    return {
      groups,
      next: selected.length > limit && last !== undefined ? encodeGroupCursor(last) : undefined,
    };
  }
}

function groupOf(fingerprint: string, group: Aggregate): DeadLetterGroup {
  const { sample } = group;
  return {
    fingerprint,
    count: group.count,
    firstSeen: group.firstSeen,
    lastSeen: group.lastSeen,
    ...(sample.type !== undefined ? { type: sample.type } : {}),
    ...(sample.handler !== undefined ? { handler: sample.handler } : {}),
    endpoint: sample.endpoint,
    reason: sample.reason,
    sampleError: sample.error.message,
  };
}

/**
 * The failure groups of `store`'s records matching `filter`: {@link DeadLetterStore.groups} when the
 * store has it, else computed here from {@link DeadLetterStore.list}.
 *
 * @remarks
 * The fallback reads every matching record on each call, so its cost grows with the records held;
 * the sample of a group is then the matching record listed last.
 *
 * @throws HarrierError `invalid-cursor` for a cursor the store did not issue, `invalid-argument` for a
 * bad limit.
 *
 * @example
 * ```ts
 * const { groups, next } = await deadLetterGroups(store, { endpoint: 'billing' }, { limit: 20 });
 * ```
 */
export async function deadLetterGroups(
  store: DeadLetterStore,
  filter: DeadLetterFilter = {},
  page: DeadLetterGroupPageOptions = {},
): Promise<DeadLetterGroupPage> {
  if (store.groups !== undefined) return store.groups(filter, page);
  groupPageLimit(page);
  if (page.cursor !== undefined) decodeGroupCursor(page.cursor);
  const accumulator = new DeadLetterGroupAccumulator();
  let rank = 0;
  let cursor: string | undefined;
  do {
    const records = await store.list(
      filter,
      cursor === undefined ? { limit: FALLBACK_PAGE } : { limit: FALLBACK_PAGE, cursor },
    );
    for (const record of records.records) accumulator.add(record, rank++);
    cursor = records.next;
  } while (cursor !== undefined);
  return accumulator.page(page);
}
