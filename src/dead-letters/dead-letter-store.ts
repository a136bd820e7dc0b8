import type { AttemptRecord, ErrorInfo } from '../broker/message-broker.js';
import type { MessageKind } from '../messages/definition.js';

/**
 * Why a message was dead-lettered. The named ones are Harrier's own; brokers and stores may add more.
 */
export type DeadLetterReason =
  | 'handler-failed'
  | 'validation-failed'
  | 'no-handler'
  | 'unknown-type'
  | 'malformed'
  | 'too-large'
  | 'signature-invalid'
  | 'projection-failed'
  | 'worker-crashed'
  | 'saga-not-found'
  | 'saga-completed'
  | 'version-unsupported'
  | (string & {});

/** Where a dead letter stands: still dead, or sent back for another try. */
export type DeadLetterStatus = 'dead' | 'replayed';

/** One replay of a dead letter. */
export interface ReplayRecord {
  /** When it was replayed, ms since the epoch. */
  readonly at: number;
  /** Who or what replayed it (`cli`, a user name); free text. */
  readonly by?: string;
  /**
   * When the replayed message was handled, ms since the epoch: set through
   * {@link DeadLetterStore.markReplayHandled} by the dispatcher that acked it (or by the replay
   * itself for a projection run in the application). Undefined while it is pending, and when it
   * died again (the record is `dead` again, with a `lastFailedAt` after `at`).
   */
  readonly handledAt?: number;
}

/** Most replay records kept per dead letter. */
export const MAX_REPLAY_HISTORY = 20;

/** A record's place in an event log. */
export interface LogPosition {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
}

/**
 * A message that will not be delivered again until someone replays it.
 *
 * @remarks
 * `envelope` is the encoded envelope exactly as it arrived, so a signed message still verifies.
 * One record exists per (message, endpoint, handler): when a replayed message dies again, its record
 * is updated and keeps its replay history.
 */
export interface DeadLetterRecord {
  /** Stable id: derived from message id, endpoint and handler. */
  readonly id: string;
  readonly messageId: string | undefined;
  readonly kind: MessageKind | undefined;
  readonly type: string | undefined;
  readonly endpoint: string;
  /** Subscription or command handler name; undefined when no handler was found. */
  readonly handler: string | undefined;
  readonly reason: DeadLetterReason;
  /** The last error. */
  readonly error: ErrorInfo;
  /** The most recent failed attempts, oldest first, at most `MAX_ATTEMPT_HISTORY`. */
  readonly attempts: readonly AttemptRecord[];
  /** How many attempts were made in all (before the last dead-lettering). */
  readonly attemptCount: number;
  readonly firstFailedAt: number;
  readonly lastFailedAt: number;
  /** Groups alike failures: a hash of the error name and its first application stack frame. */
  readonly fingerprint: string;
  /** The encoded envelope exactly as received. */
  readonly envelope: string;
  /** Partition key as published, used when the record is replayed. */
  readonly partitionKey: string | undefined;
  /** Whether the message type is ordered, used when the record is replayed. */
  readonly ordered: boolean;
  /**
   * Where a projection fed from an event log met the event, for `projection-failed` records of
   * such projections: no queue holds them, so a replay runs the projection in the application
   * (see {@link replayDeadLetters}'s `projections` option) instead of redelivering through a broker.
   * @defaultValue undefined (the message came from a broker queue)
   */
  readonly logPosition?: LogPosition | undefined;
  readonly status: DeadLetterStatus;
  /** Replays of this record, oldest first, at most {@link MAX_REPLAY_HISTORY}. */
  readonly replays: readonly ReplayRecord[];
}

/** Selects dead letters; every field narrows, none means all. */
export interface DeadLetterFilter {
  readonly endpoint?: string;
  readonly type?: string;
  readonly handler?: string;
  readonly reason?: string;
  readonly fingerprint?: string;
  /** Last failure at or after this time (ms since the epoch). */
  readonly since?: number;
  /** Last failure before this time (ms since the epoch). */
  readonly until?: number;
  /**
   * Which records to include.
   * @defaultValue 'dead'
   */
  readonly status?: DeadLetterStatus | 'any';
  /**
   * Case-insensitive substring searched for in the last error's message and stack and in the stored
   * envelope text (which holds the payload); a record matches when any of them contains it.
   *
   * @remarks
   * No store keeps a text index: a search reads records until it has filled a page, so its first
   * page comes quickly when matches are common and its cost grows with the records held when they
   * are rare. So that a rare text still answers quickly, a store may end a page of
   * {@link DeadLetterStore.list} after reading a bounded number of records: with `text`, a page may
   * hold fewer than `limit` records, even none, while `next` is defined; follow `next` until it is
   * undefined to search everything. An empty string matches every record.
   *
   * @defaultValue undefined (no text search)
   */
  readonly text?: string;
}

/** Paging of {@link DeadLetterStore.list}. */
export interface DeadLetterPageOptions {
  /**
   * Most records in one page.
   * @defaultValue 100
   */
  readonly limit?: number;
  /** The `next` cursor of the previous page. */
  readonly cursor?: string;
}

/** One page of dead letters, newest failure last within the store's order. */
export interface DeadLetterPage {
  readonly records: readonly DeadLetterRecord[];
  /** Pass as `cursor` to get the next page; undefined on the last page. */
  readonly next: string | undefined;
}

/** Paging of {@link DeadLetterStore.groups}. */
export interface DeadLetterGroupPageOptions {
  /**
   * Most groups in one page.
   * @defaultValue 50
   */
  readonly limit?: number;
  /** The `next` cursor of the previous page. */
  readonly cursor?: string;
}

/**
 * Dead letters that failed alike: every selected record with one fingerprint.
 *
 * @remarks
 * `type`, `handler`, `endpoint`, `reason` and `sampleError` describe one record of the group, chosen
 * by the store (Harrier's stores take the one added or updated last), to show what the group is about; the records of a group
 * share a fingerprint, not necessarily these fields.
 */
export interface DeadLetterGroup {
  readonly fingerprint: string;
  /** How many selected records the group holds. */
  readonly count: number;
  /** The earliest `firstFailedAt` of its selected records. */
  readonly firstSeen: number;
  /** The latest `lastFailedAt` of its selected records. */
  readonly lastSeen: number;
  readonly type?: string;
  readonly handler?: string;
  readonly endpoint?: string;
  readonly reason: DeadLetterReason;
  /** The message of the sample record's last error. */
  readonly sampleError: string;
}

/** One page of failure groups, latest `lastSeen` first (ties: fingerprint descending). */
export interface DeadLetterGroupPage {
  readonly groups: readonly DeadLetterGroup[];
  /** Pass as `cursor` to get the next page; undefined on the last page. */
  readonly next: string | undefined;
}

/**
 * Where dead letters are kept: the contract every store implements and the conformance suite checks.
 */
export interface DeadLetterStore {
  /**
   * Adds a record, or updates the one with the same id: the update keeps `firstFailedAt` and
   * `replays`, takes everything else from `record`, and sets status back to `dead`.
   */
  add(record: DeadLetterRecord): Promise<DeadLetterRecord>;
  get(id: string): Promise<DeadLetterRecord | undefined>;
  /** Records matching `filter`, ordered by first insertion, in pages. */
  list(filter?: DeadLetterFilter, page?: DeadLetterPageOptions): Promise<DeadLetterPage>;
  count(filter?: DeadLetterFilter): Promise<number>;
  /**
   * Marks a record replayed and appends `replay` to its history.
   * @returns false when no record has that id.
   */
  markReplayed(id: string, replay: ReplayRecord): Promise<boolean>;
  /**
   * Records that the message of a replayed record was handled: sets `handledAt` on its latest replay.
   *
   * @remarks
   * Optional, so a store written before it existed still implements the contract; without it a
   * replay's outcome stays `pending` until the message dies again (see {@link replayOutcome}).
   * Does nothing (and returns false) when no record has that id, when the record is `dead` (it died
   * again after the replay), or when it has no replay.
   * @returns whether a replay was marked.
   */
  markReplayHandled?(id: string, at: number): Promise<boolean>;
  /** Deletes records by id; returns how many existed. */
  remove(ids: readonly string[]): Promise<number>;
  /** Deletes every record matching `filter`; returns how many. */
  purge(filter?: DeadLetterFilter): Promise<number>;
  /**
   * The failure groups of the records matching `filter` (by default the dead ones), latest
   * `lastSeen` first, in pages.
   *
   * @remarks
   * Optional, so a store written before groups existed still implements the contract: callers go
   * through {@link deadLetterGroups}, which uses this method when present and otherwise computes the
   * groups from {@link DeadLetterStore.list}, reading every matching record. A store that can answer
   * from aggregates it keeps should implement it. Replayed records count only when `filter.status`
   * selects them (`'replayed'` or `'any'`), as in {@link DeadLetterStore.count}.
   *
   * @throws HarrierError `invalid-cursor` for a cursor the store did not issue, `invalid-argument`
   * for a limit that is not a positive integer.
   */
  groups?(filter?: DeadLetterFilter, page?: DeadLetterGroupPageOptions): Promise<DeadLetterGroupPage>;
  /** Releases the store's resources. */
  close(): Promise<void>;
}
