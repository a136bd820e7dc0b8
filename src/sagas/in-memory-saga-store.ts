import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import { SagaConflictError } from '../errors/saga-conflict-error.js';
import { settle } from '../errors/settle.js';
import {
  compareSagaPositions,
  completedRetentionOf,
  decodeSagaCursor,
  encodeSagaCursor,
  sagaPageLimit,
  serializeSagaWrite,
  type SagaInstance,
  type SagaSummary,
  type SagaListFilter,
  type SagaPage,
  type SagaPageOptions,
  type SagaStore,
  type SagaWrite,
} from './saga-store.js';

/** Options of {@link InMemorySagaStore}. */
export interface InMemorySagaStoreOptions {
  /**
   * How long a completed instance is kept after its latest save, in ms (measured with `clock`).
   * @defaultValue 604800000 (7 days)
   */
  readonly completedRetentionMs?: number;
  /**
   * The clock that decides when a completed instance's retention ran out (checked on every read).
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
}

/** A stored instance: its JSON text and metadata, so no caller shares objects with the store. */
interface Entry {
  readonly saga: string;
  readonly id: string;
  readonly stateJson: string;
  readonly stateVersion: number;
  readonly appliedJson: string;
  readonly timeoutsJson: string;
  readonly version: number;
  readonly status: SagaInstance['status'];
  readonly startedAt: number;
  readonly updatedAt: number;
  readonly completedAt?: number;
  /** When a completed instance's retention runs out, by the store's clock. */
  readonly expiresAt?: number;
}

/**
 * Keeps saga instances in this process's memory, for tests and single-process applications.
 *
 * @remarks
 * State and applied steps are kept as JSON, as in every other store, so what `get` returns equals
 * what a Redis store would return (a `Date` comes back as a string) and never shares objects with
 * the caller. Completed instances disappear `completedRetentionMs` after their latest save,
 * measured with the injected clock (not the write's `now`) when the store is read, as Redis
 * measures a key's TTL. Nothing survives the process.
 *
 * @example
 * ```ts
 * const store = new InMemorySagaStore({ clock: new ManualClock() });
 * const created = await store.save({ saga: 'fulfilment', id: 'o-1', state: { paid: false }, status: 'active', timeouts: [], now: Date.now() }, 0);
 * ```
 */
export class InMemorySagaStore implements SagaStore {
  readonly #retentionMs: number;
  readonly #clock: Clock;
  /** `${saga.length}:${saga}:${id}` -> entry. */
  readonly #entries = new Map<string, Entry>();
  #closed = false;

  /** @throws HarrierError `invalid-option` when `completedRetentionMs` is not a positive whole number. */
  constructor(options: InMemorySagaStoreOptions = {}) {
    this.#retentionMs = completedRetentionOf(options.completedRetentionMs, 'InMemorySagaStore');
    this.#clock = options.clock ?? systemClock;
  }

  get(saga: string, id: string): Promise<SagaInstance | undefined> {
    return this.#run(() => {
      const entry = this.#live(keyOf(saga, id));
      return entry === undefined ? undefined : toInstance(entry);
    });
  }

  save(write: SagaWrite, expectedVersion: number): Promise<SagaInstance> {
    return this.#run(() => {
      const json = serializeSagaWrite(write, expectedVersion);
      const key = keyOf(write.saga, write.id);
      const stored = this.#live(key);
      const actual = stored?.version ?? 0;
      if (actual !== expectedVersion) {
        throw new SagaConflictError(write.saga, write.id, expectedVersion, actual);
      }
      const completedAt =
        write.status !== 'completed'
          ? undefined
          : stored?.status === 'completed'
            ? stored.completedAt
            : write.now;
      const entry: Entry = {
        saga: write.saga,
        id: write.id,
        stateJson: json.state,
        stateVersion: json.stateVersion,
        appliedJson: json.applied,
        timeoutsJson: json.timeouts,
        version: actual + 1,
        status: write.status,
        startedAt: stored?.startedAt ?? write.now,
        updatedAt: write.now,
        ...(completedAt === undefined
          ? {}
          : { completedAt, expiresAt: this.#clock.now() + this.#retentionMs }),
      };
      this.#entries.set(key, entry);
      return toInstance(entry);
    });
  }

  list(filter: SagaListFilter = {}, page: SagaPageOptions = {}): Promise<SagaPage> {
    return this.#run(() => {
      const limit = sagaPageLimit(page.limit);
      const after = page.cursor === undefined ? undefined : decodeSagaCursor(page.cursor);
      const matching: Entry[] = [];
      for (const key of [...this.#entries.keys()]) {
        const entry = this.#live(key);
        if (entry === undefined) continue;
        if (filter.saga !== undefined && entry.saga !== filter.saga) continue;
        if (filter.status !== undefined && entry.status !== filter.status) continue;
        if (after !== undefined && compareSagaPositions(entry, after) <= 0) continue;
        matching.push(entry);
      }
      matching.sort(compareSagaPositions);
      const instances = matching.slice(0, limit).map(toSummary);
      const last = instances.at(-1);
      return matching.length > limit && last !== undefined
        ? { instances, next: encodeSagaCursor(last) }
        : { instances };
    });
  }

  remove(saga: string, id: string): Promise<boolean> {
    return this.#run(() => {
      const key = keyOf(saga, id);
      const existed = this.#live(key) !== undefined;
      this.#entries.delete(key);
      return existed;
    });
  }

  /** Drops every instance; later calls reject with `store-closed`. Closing twice is harmless. */
  close(): Promise<void> {
    this.#closed = true;
    this.#entries.clear();
    return Promise.resolve();
  }

  /** The entry under `key`, unless its retention ran out (then it is deleted). */
  #live(key: string): Entry | undefined {
    const entry = this.#entries.get(key);
    if (entry?.expiresAt !== undefined && entry.expiresAt <= this.#clock.now()) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry;
  }

  /** Runs `body` on an open store, turning anything it throws into a rejection. */
  #run<T>(body: () => T): Promise<T> {
    return settle(() => {
      if (this.#closed) {
        throw new HarrierError(
          'store-closed',
          'The in-memory saga store is closed: create a new InMemorySagaStore to keep saga instances again',
        );
      }
      return body();
    });
  }
}

const keyOf = (saga: string, id: string): string => `${saga.length}:${saga}:${id}`;

function toInstance(entry: Entry): SagaInstance {
  return { ...toSummary(entry), applied: JSON.parse(entry.appliedJson) as SagaInstance['applied'] };
}

/** The instance without its applied steps, as `list` returns it. */
function toSummary(entry: Entry): SagaSummary {
  return {
    saga: entry.saga,
    id: entry.id,
    state: JSON.parse(entry.stateJson) as unknown,
    stateVersion: entry.stateVersion,
    version: entry.version,
    status: entry.status,
    startedAt: entry.startedAt,
    updatedAt: entry.updatedAt,
    ...(entry.completedAt === undefined ? {} : { completedAt: entry.completedAt }),
    timeouts: JSON.parse(entry.timeoutsJson) as SagaInstance['timeouts'],
  };
}
