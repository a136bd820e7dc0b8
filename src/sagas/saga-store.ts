import type { TransactionalUnitOfWork } from '../dispatch/transactional-unit-of-work.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { MessageContext } from '../handlers/message-context.js';
import type { OutgoingMessage } from '../messages/outgoing-message.js';

/** Whether a saga instance still takes messages (`active`) or has finished (`completed`). */
export type SagaStatus = 'active' | 'completed';

/** A timeout a saga step requested and that has not fired yet. */
export interface SagaTimeoutRecord {
  /** Identifies the timeout within its instance (stable across redeliveries of the requesting step). */
  readonly id: string;
  /** The message type of the timeout definition, e.g. `orders.PaymentTimedOut`. */
  readonly type: string;
  /** When it is due, in ms since the epoch. */
  readonly dueAt: number;
}

/**
 * A step the saga runtime saved: the message it handled and the messages it recorded.
 *
 * @remarks
 * A redelivery of that message finds it here and publishes the same messages again (same ids)
 * instead of running the step twice on the state it already changed.
 */
export interface SagaAppliedStep {
  /** The id of the message the step handled. */
  readonly message: string;
  /** The messages the step recorded, bodies included, in the order it recorded them. */
  readonly outgoing: readonly OutgoingMessage[];
  /**
   * When the step was saved, in ms since the epoch: the runtime keeps young steps for redeliveries
   * (`keepAppliedMs`). Absent in steps saved before the field existed.
   */
  readonly at?: number;
}

/** One stored saga instance: its state, version and bookkeeping. */
export interface SagaInstance<S = unknown> {
  /** The saga name. */
  readonly saga: string;
  /** The saga id: the correlation value that maps messages to this instance. */
  readonly id: string;
  /** The saga's state, as JSON would return it (a store keeps it JSON-serialised). */
  readonly state: S;
  /**
   * The version of the saga's state shape the state was saved with (the saga's `version`): the
   * runtime raises an older state with the saga's upcasters before parsing it. 1 for an instance
   * saved before the field existed.
   */
  readonly stateVersion: number;
  /** 1 after the first save, plus 1 per later save; the compare-and-set token of {@link SagaStore.save}. */
  readonly version: number;
  /** `completed` once a step completed the saga; the store removes it after its retention. */
  readonly status: SagaStatus;
  /** The `now` of the save that created the instance. */
  readonly startedAt: number;
  /** The `now` of the latest save. */
  readonly updatedAt: number;
  /** The `now` of the save that completed the instance; absent while it is active. */
  readonly completedAt?: number;
  /** Timeouts requested and not fired yet. */
  readonly timeouts: readonly SagaTimeoutRecord[];
  /**
   * The runtime's redelivery bookkeeping: the latest steps saved, oldest first (as JSON would
   * return them; `[]` when the write that stored the instance gave none).
   */
  readonly applied: readonly SagaAppliedStep[];
}

/** What {@link SagaStore.save} writes: the whole new state of one instance. */
export interface SagaWrite<S = unknown> {
  /** The saga name. */
  readonly saga: string;
  /** The saga id. */
  readonly id: string;
  /** The new state; must survive `JSON.stringify` (stores keep JSON, so `Date`s come back as strings). */
  readonly state: S;
  /**
   * The version of the saga's state shape `state` has (the saga's `version`); a whole number from 1.
   * @defaultValue 1
   */
  readonly stateVersion?: number;
  /** The new status; `completed` starts the retention after which the store removes the instance. */
  readonly status: SagaStatus;
  /** Every pending timeout after this save (replaces the stored list). */
  readonly timeouts: readonly SagaTimeoutRecord[];
  /**
   * The steps to remember after this save, oldest first (replaces the stored list); must survive
   * `JSON.stringify`.
   * @defaultValue [] (nothing remembered)
   */
  readonly applied?: readonly SagaAppliedStep[];
  /** The time of the save in ms since the epoch: `startedAt` on create, `updatedAt` always. */
  readonly now: number;
}

/** Which instances {@link SagaStore.list} returns; every field given must match. */
export interface SagaListFilter {
  /** Only instances of this saga. */
  readonly saga?: string;
  /** Only instances with this status. */
  readonly status?: SagaStatus;
}

/** Paging of {@link SagaStore.list}. */
export interface SagaPageOptions {
  /**
   * Most instances returned.
   * @defaultValue 100
   */
  readonly limit?: number;
  /** The `next` of the previous page; absent for the first page. */
  readonly cursor?: string;
}

/**
 * A saga instance as {@link SagaStore.list} returns it: everything but its applied steps, which only
 * {@link SagaStore.get} reads (they can be large).
 */
export type SagaSummary<S = unknown> = Omit<SagaInstance<S>, 'applied'>;

/** One page of {@link SagaStore.list}. */
export interface SagaPage {
  /** Instances, without their applied steps, ordered by saga name, then id (UTF-8 byte order). */
  instances: SagaSummary[];
  /** Cursor of the next page; absent when this page is the last. */
  next?: string;
}

/**
 * The saga step a {@link SagaStore.get} or {@link SagaStore.save} belongs to, when it runs in the
 * bus's unit of work.
 *
 * @remarks
 * A store that joined the unit (see {@link SagaStore.joinUnitOfWork}) finds the unit's transaction
 * through the step's context and reads and writes in it; any other store ignores it.
 */
export interface SagaStoreCall {
  /** The context of the saga step, which the unit of work knows its transaction by. */
  readonly context: MessageContext;
}

/**
 * Where saga instances live between steps: one record per (saga, id), written by compare-and-set.
 *
 * @remarks
 * `save` is the only write a saga step makes: it succeeds only when the caller read the version it
 * expects, so two concurrent steps of one instance never both win and no update is lost; the loser
 * gets a {@link SagaConflictError} and re-runs on fresh state. Completed instances are removed after
 * a retention (each store's `completedRetentionMs`, default 7 days, counted from the latest save of
 * the completed instance), so late messages can still find them completed for a while. Every call
 * on a closed store rejects with `store-closed`. `runSagaStoreConformance` from
 * `harrier/testing/conformance` checks an implementation.
 */
export interface SagaStore {
  /**
   * The instance, or undefined when it never existed, was removed or its retention ran out.
   *
   * @param call - the saga step reading it, when it runs in the unit of work this store joined: the
   * read then runs in the unit's transaction, and holds the instance until it commits.
   */
  get(saga: string, id: string, call?: SagaStoreCall): Promise<SagaInstance | undefined>;
  /**
   * Compare-and-set: `expectedVersion` 0 creates (fails if it exists); otherwise the stored version
   * must equal it. Returns the stored instance (version + 1).
   *
   * @throws SagaConflictError (`saga-conflict`) when the stored version is not `expectedVersion`.
   * @throws HarrierError `invalid-argument` when the state is not JSON-serialisable or
   * `expectedVersion` is not a whole number from 0.
   * @param call - the saga step saving it, when it runs in the unit of work this store joined: the
   * write then commits with the unit's transaction, or not at all.
   */
  save(write: SagaWrite, expectedVersion: number, call?: SagaStoreCall): Promise<SagaInstance>;
  /**
   * One page of instances matching `filter`, ordered by saga name then id, without their applied
   * steps (a store should not read them: {@link SagaStore.get} returns them).
   *
   * @throws HarrierError `invalid-cursor` for a cursor this store did not issue, `invalid-argument`
   * for a limit that is not a positive integer.
   */
  list(filter?: SagaListFilter, page?: SagaPageOptions): Promise<SagaPage>;
  /** Deletes the instance; true when it existed. */
  remove(saga: string, id: string): Promise<boolean>;
  /** Releases the store's resources; later calls reject with `store-closed`. Closing twice is harmless. */
  close(): Promise<void>;
  /**
   * Whether saga steps can keep their instance in the transaction of the bus's unit of work: the bus
   * asks once, at start, when it has both. True makes every step run in the unit (its state, its
   * writes, its inbox row and outgoing messages commit together), passing its {@link SagaStoreCall}
   * to `get` and `save`; false (or no method) keeps steps apart from the unit.
   *
   * @throws HarrierError `invalid-option` when the store could join this kind of unit but not this
   * one (another database or schema), naming the fix.
   */
  joinUnitOfWork?(unit: TransactionalUnitOfWork): Promise<boolean>;
}

/** Default of `completedRetentionMs` in every Harrier saga store: 7 days. */
export const DEFAULT_COMPLETED_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

/** Default page size of {@link SagaStore.list}. */
export const DEFAULT_SAGA_PAGE_LIMIT = 100;

const CURSOR_PREFIX = 'sg1:';

/**
 * A store's `completedRetentionMs` option, or the default of 7 days.
 *
 * @param owner - the store's class name, for the message.
 * @throws HarrierError `invalid-option` when it is not a positive whole number of ms.
 */
export function completedRetentionOf(value: number | undefined, owner: string): number {
  const retention = value ?? DEFAULT_COMPLETED_RETENTION_MS;
  if (!Number.isSafeInteger(retention) || retention < 1) {
    throw new HarrierError(
      'invalid-option',
      `${owner} completedRetentionMs must be a positive whole number of ms, got ${retention}: pass e.g. 86400000 for a day, or leave it out for 7 days`,
    );
  }
  return retention;
}

/** Where a {@link SagaPage} ended: the saga name and id of its last instance. */
export interface SagaCursorPosition {
  /** Saga name of the last instance returned. */
  readonly saga: string;
  /** Saga id of the last instance returned. */
  readonly id: string;
}

/** The JSON a store keeps of a {@link SagaWrite}, from {@link serializeSagaWrite}. */
export interface SerializedSagaWrite {
  /** `JSON.stringify` of the state. */
  readonly state: string;
  /** `JSON.stringify` of the applied steps (`[]` when the write gave none). */
  readonly applied: string;
  /** `JSON.stringify` of the timeouts, each reduced to `id`, `type` and `dueAt`. */
  readonly timeouts: string;
  /** The write's `stateVersion`, 1 when it gave none. */
  readonly stateVersion: number;
}

/**
 * Checks a {@link SagaWrite} and its expected version, and returns its fields as JSON.
 *
 * @remarks
 * For implementers of a {@link SagaStore}: every store refuses the same inputs with the same codes.
 *
 * @throws HarrierError `invalid-argument` for an empty saga name or id, an `expectedVersion` that is
 * not a whole number from 0, a status other than `active`/`completed`, a `stateVersion` that is not
 * a whole number from 1, a state `JSON.stringify` cannot write, or applied steps that are not a JSON array of `{ message, outgoing, at? }` entries.
 */
export function serializeSagaWrite(write: SagaWrite, expectedVersion: number): SerializedSagaWrite {
  const what = `saga "${write.saga}" instance "${write.id}"`;
  if (
    typeof write.saga !== 'string' ||
    write.saga === '' ||
    typeof write.id !== 'string' ||
    write.id === ''
  ) {
    throw new HarrierError(
      'invalid-argument',
      `Cannot save ${what}: the saga name and id must be non-empty strings`,
    );
  }
  if (!Number.isSafeInteger(expectedVersion) || expectedVersion < 0) {
    throw new HarrierError(
      'invalid-argument',
      `Cannot save ${what} with expected version ${expectedVersion}: pass 0 to create it, or the version you loaded`,
    );
  }
  // Callers in plain JavaScript can pass anything.
  const status: string = write.status;
  if (status !== 'active' && status !== 'completed') {
    throw new HarrierError(
      'invalid-argument',
      `Cannot save ${what} with status "${status}": use "active" or "completed"`,
    );
  }
  const stateVersion: unknown = write.stateVersion ?? 1;
  if (!Number.isSafeInteger(stateVersion) || (stateVersion as number) < 1) {
    throw new HarrierError(
      'invalid-argument',
      `Cannot save ${what} with state version ${String(stateVersion)}: pass the saga's version, a whole number from 1, or leave it out for 1`,
    );
  }
  const state = jsonOrRefuse(write.state, `${what}: its state is`, 'keep plain data in saga state');
  if (state === undefined) {
    throw new HarrierError(
      'invalid-argument',
      `Cannot save ${what}: its state is ${typeof write.state}, which JSON cannot hold; use an object`,
    );
  }
  const applied: unknown = write.applied ?? [];
  if (
    !Array.isArray(applied) ||
    !applied.every(
      (step: Partial<SagaAppliedStep> | null) =>
        typeof step?.message === 'string' &&
        Array.isArray(step.outgoing) &&
        (step.at === undefined || Number.isFinite(step.at)),
    )
  ) {
    throw new HarrierError(
      'invalid-argument',
      `Cannot save ${what}: its applied steps must be an array of { message: string, outgoing: [], at?: number }; leave applied out to store none`,
    );
  }
  const timeouts = write.timeouts.map(({ id, type, dueAt }) => ({ id, type, dueAt }));
  return {
    state,
    applied:
      jsonOrRefuse(applied, `${what}: its applied steps are`, 'record plain outgoing messages') ?? '[]',
    timeouts: JSON.stringify(timeouts),
    stateVersion: stateVersion as number,
  };
}

/** `JSON.stringify(value)`, refusing what it cannot write with `invalid-argument`. */
function jsonOrRefuse(value: unknown, what: string, fix: string): string | undefined {
  try {
    return jsonOf(value);
  } catch (error) {
    throw new HarrierError(
      'invalid-argument',
      `Cannot save ${what} not JSON-serialisable (${error instanceof Error ? error.message : String(error)}); ${fix}`,
      { cause: error },
    );
  }
}

/** `JSON.stringify`, typed as it behaves: undefined for undefined, functions and symbols. */
function jsonOf(value: unknown): string | undefined {
  return JSON.stringify(value);
}

/**
 * Checks a {@link SagaPageOptions.limit} and returns it, or the default.
 *
 * @throws HarrierError `invalid-argument` when the limit is not a positive integer.
 */
export function sagaPageLimit(limit: number | undefined): number {
  const value = limit ?? DEFAULT_SAGA_PAGE_LIMIT;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new HarrierError(
      'invalid-argument',
      `Saga page limit must be a positive integer, got ${value}: pass a whole number such as 100, or leave it out for the default`,
    );
  }
  return value;
}

/** The opaque cursor that resumes a listing after `position`. */
export function encodeSagaCursor(position: SagaCursorPosition): string {
  return Buffer.from(`${CURSOR_PREFIX}${JSON.stringify([position.saga, position.id])}`, 'utf8').toString(
    'base64url',
  );
}

/**
 * The position a cursor from {@link encodeSagaCursor} stands for.
 *
 * @throws HarrierError `invalid-cursor` for a cursor {@link encodeSagaCursor} did not issue.
 */
export function decodeSagaCursor(cursor: string): SagaCursorPosition {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  let parsed: unknown;
  try {
    parsed = text.startsWith(CURSOR_PREFIX) ? JSON.parse(text.slice(CURSOR_PREFIX.length)) : undefined;
  } catch {
    parsed = undefined;
  }
  if (
    !Array.isArray(parsed) ||
    parsed.length !== 2 ||
    typeof parsed[0] !== 'string' ||
    typeof parsed[1] !== 'string'
  ) {
    throw new HarrierError(
      'invalid-cursor',
      `Saga cursor "${cursor}" was not issued by a saga store: pass the \`next\` of the previous page, or no cursor to start from the first page`,
    );
  }
  return { saga: parsed[0], id: parsed[1] };
}

/**
 * Orders instances by saga name, then id, comparing UTF-8 bytes (negative: `a` first).
 *
 * @remarks
 * Byte order is what Redis sorted sets use, so every store pages in the same order.
 */
export function compareSagaPositions(a: SagaCursorPosition, b: SagaCursorPosition): number {
  return compareUtf8(a.saga, b.saga) || compareUtf8(a.id, b.id);
}

function compareUtf8(a: string, b: string): number {
  return a === b ? 0 : Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}
