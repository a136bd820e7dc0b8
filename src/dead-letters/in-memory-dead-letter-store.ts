import { HarrierError } from '../errors/harrier-error.js';
import { settle } from '../errors/settle.js';
import {
  MAX_REPLAY_HISTORY,
  type DeadLetterFilter,
  type DeadLetterGroupPage,
  type DeadLetterGroupPageOptions,
  type DeadLetterPage,
  type DeadLetterPageOptions,
  type DeadLetterRecord,
  type DeadLetterStore,
  type ReplayRecord,
} from './dead-letter-store.js';
import { DeadLetterGroupAccumulator } from './dead-letter-groups.js';
import { matchesDeadLetterFilter } from './matches-dead-letter-filter.js';

/** Options of {@link InMemoryDeadLetterStore}. */
export interface InMemoryDeadLetterStoreOptions {
  /**
   * Most records kept; when a new record would exceed it, the oldest by first insertion is dropped.
   * @defaultValue 100000
   */
  readonly maxRecords?: number;
}

interface Entry {
  /** Position in first-insertion order; never reused, so a cursor stays valid across removals. */
  readonly seq: number;
  record: DeadLetterRecord;
  live: boolean;
  /** When the record was last added or updated, in store writes; picks a group's sample. */
  touched: number;
}

const DEFAULT_PAGE_LIMIT = 100;
const CURSOR_PREFIX = 'dl1:';

/** A deep copy of a record, so neither the caller nor the store can change the other's copy. */
function copyRecord(record: DeadLetterRecord): DeadLetterRecord {
  return {
    ...record,
    error: { ...record.error },
    attempts: record.attempts.map((attempt) => ({ ...attempt, error: { ...attempt.error } })),
    replays: record.replays.map((replay) => ({ ...replay })),
    ...(record.logPosition !== undefined ? { logPosition: { ...record.logPosition } } : {}),
  };
}

function encodeCursor(seq: number): string {
  return Buffer.from(`${CURSOR_PREFIX}${seq}`, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): number {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const digits = text.startsWith(CURSOR_PREFIX) ? text.slice(CURSOR_PREFIX.length) : '';
  if (!/^\d+$/.test(digits)) {
    throw new HarrierError(
      'invalid-cursor',
      `Dead-letter cursor "${cursor}" was not issued by this store: pass the \`next\` of the previous page, or no cursor to start from the first page`,
    );
  }
  return Number(digits);
}

/**
 * Keeps dead letters in this process's memory, for tests and single-process applications.
 *
 * @remarks
 * Records are returned as copies, so changing a returned record never changes the store. Nothing
 * survives the process; use the Redis store where dead letters must outlive a restart.
 *
 * @example
 * ```ts
 * const store = new InMemoryDeadLetterStore({ maxRecords: 10_000 });
 * const { records, next } = await store.list({ endpoint: 'billing' }, { limit: 50 });
 * ```
 */
export class InMemoryDeadLetterStore implements DeadLetterStore {
  readonly #maxRecords: number;
  /** Live entries by id, in first-insertion order (a Map keeps the order of the first `set`). */
  readonly #byId = new Map<string, Entry>();
  /** Every entry by ascending `seq`, removed ones included until compaction, for cursor look-up. */
  #order: Entry[] = [];
  #removed = 0;
  #seq = 0;
  #writes = 0;
  #closed = false;

  /** @throws HarrierError `invalid-option` when `maxRecords` is not a positive integer. */
  constructor(options: InMemoryDeadLetterStoreOptions = {}) {
    const maxRecords = options.maxRecords ?? 100_000;
    if (!Number.isInteger(maxRecords) || maxRecords < 1) {
      throw new HarrierError(
        'invalid-option',
        `InMemoryDeadLetterStore maxRecords must be a positive integer, got ${maxRecords}: pass a whole number such as 100000, or leave it out for the default`,
      );
    }
    this.#maxRecords = maxRecords;
  }

  add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    return this.#run(() => {
      const existing = this.#byId.get(record.id);
      if (existing !== undefined) {
        existing.record = {
          ...copyRecord(record),
          firstFailedAt: existing.record.firstFailedAt,
          replays: existing.record.replays,
          status: 'dead',
        };
        existing.touched = this.#writes++;
        return copyRecord(existing.record);
      }
      const entry: Entry = {
        seq: this.#seq++,
        record: copyRecord(record),
        live: true,
        touched: this.#writes++,
      };
      this.#byId.set(record.id, entry);
      this.#order.push(entry);
      while (this.#byId.size > this.#maxRecords) {
        const oldest = this.#byId.keys().next();
        if (oldest.done === true) break;
        this.#delete(oldest.value);
      }
      return copyRecord(entry.record);
    });
  }

  get(id: string): Promise<DeadLetterRecord | undefined> {
    return this.#run(() => {
      const entry = this.#byId.get(id);
      return entry === undefined ? undefined : copyRecord(entry.record);
    });
  }

  /** @throws HarrierError `invalid-cursor` for a cursor this store did not issue, `invalid-argument` for a bad limit. */
  list(filter: DeadLetterFilter = {}, page: DeadLetterPageOptions = {}): Promise<DeadLetterPage> {
    return this.#run(() => {
      const limit = page.limit ?? DEFAULT_PAGE_LIMIT;
      if (!Number.isInteger(limit) || limit < 1) {
        throw new HarrierError(
          'invalid-argument',
          `Dead-letter page limit must be a positive integer, got ${limit}: pass a whole number such as 100, or leave it out for the default`,
        );
      }
      const after = page.cursor === undefined ? -1 : decodeCursor(page.cursor);
      const records: DeadLetterRecord[] = [];
      let lastSeq = -1;
      let more = false;
      for (let i = this.#firstIndexAfter(after); i < this.#order.length; i++) {
        const entry = this.#order[i];
        if (entry === undefined || !entry.live || !matchesDeadLetterFilter(entry.record, filter)) continue;
        if (records.length === limit) {
          more = true;
          break;
        }
        records.push(copyRecord(entry.record));
        lastSeq = entry.seq;
      }
      return { records, next: more ? encodeCursor(lastSeq) : undefined };
    });
  }

  count(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(() => {
      let n = 0;
      for (const entry of this.#byId.values()) if (matchesDeadLetterFilter(entry.record, filter)) n++;
      return n;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.groups}
   *
   * @remarks
   * Computed from every record on each call.
   */
  groups(filter: DeadLetterFilter = {}, page: DeadLetterGroupPageOptions = {}): Promise<DeadLetterGroupPage> {
    return this.#run(() => {
      const accumulator = new DeadLetterGroupAccumulator();
      for (const entry of this.#byId.values()) {
        if (matchesDeadLetterFilter(entry.record, filter)) accumulator.add(entry.record, entry.touched);
      }
      return accumulator.page(page);
    });
  }

  markReplayed(id: string, replay: ReplayRecord): Promise<boolean> {
    return this.#run(() => {
      const entry = this.#byId.get(id);
      if (entry === undefined) return false;
      entry.record = {
        ...entry.record,
        status: 'replayed',
        replays: [...entry.record.replays, { ...replay }].slice(-MAX_REPLAY_HISTORY),
      };
      return true;
    });
  }

  markReplayHandled(id: string, at: number): Promise<boolean> {
    return this.#run(() => {
      const entry = this.#byId.get(id);
      const latest = entry?.record.replays.at(-1);
      if (entry === undefined || entry.record.status !== 'replayed' || latest === undefined) return false;
      // A second delivery of the same replay (at-least-once) keeps the first time it was handled.
      if (latest.handledAt !== undefined) return true;
      entry.record = {
        ...entry.record,
        replays: [...entry.record.replays.slice(0, -1), { ...latest, handledAt: at }],
      };
      return true;
    });
  }

  remove(ids: readonly string[]): Promise<number> {
    return this.#run(() => {
      let n = 0;
      for (const id of ids) if (this.#delete(id)) n++;
      return n;
    });
  }

  purge(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(() => {
      const doomed = [...this.#byId.values()].filter((entry) =>
        matchesDeadLetterFilter(entry.record, filter),
      );
      for (const entry of doomed) this.#delete(entry.record.id);
      return doomed.length;
    });
  }

  /** Drops every record; later calls throw `store-closed`. Closing twice is harmless. */
  close(): Promise<void> {
    this.#closed = true;
    this.#byId.clear();
    this.#order = [];
    this.#removed = 0;
    return Promise.resolve();
  }

  /** Runs `body` on an open store, turning anything it throws into a rejection. */
  #run<T>(body: () => T): Promise<T> {
    return settle(() => {
      this.#assertOpen();
      return body();
    });
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The in-memory dead-letter store is closed: create a new InMemoryDeadLetterStore to keep dead letters again',
      );
    }
  }

  #delete(id: string): boolean {
    const entry = this.#byId.get(id);
    if (entry === undefined) return false;
    this.#byId.delete(id);
    entry.live = false;
    this.#removed++;
    // Compact only when most of the array is dead, so removal stays O(1) amortised.
    if (this.#removed > 1024 && this.#removed * 2 > this.#order.length) {
      this.#order = this.#order.filter((e) => e.live);
      this.#removed = 0;
    }
    return true;
  }

  /** Index of the first entry whose seq is greater than `seq` (binary search; `#order` is sorted). */
  #firstIndexAfter(seq: number): number {
    let lo = 0;
    let hi = this.#order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.#order[mid]?.seq ?? Infinity) <= seq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
