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
  | 'saga-not-found'
  | 'saga-completed'
  | (string & {});

/** Where a dead letter stands: still dead, or sent back for another try. */
export type DeadLetterStatus = 'dead' | 'replayed';

/** One replay of a dead letter. */
export interface ReplayRecord {
  /** When it was replayed, ms since the epoch. */
  readonly at: number;
  /** Who or what replayed it (`cli`, a user name); free text. */
  readonly by?: string;
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
  /** Deletes records by id; returns how many existed. */
  remove(ids: readonly string[]): Promise<number>;
  /** Deletes every record matching `filter`; returns how many. */
  purge(filter?: DeadLetterFilter): Promise<number>;
  /** Releases the store's resources. */
  close(): Promise<void>;
}
