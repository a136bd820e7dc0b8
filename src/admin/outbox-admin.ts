/** Why the relay parked an outbox row. */
export type ParkedOutboxReason =
  /** Its tries (the relay's `maxAttempts`) failed: a command with no route, a message the broker refuses. */
  | 'failed'
  /** It can never be published: a kind Harrier does not know, a body that is not its envelope. */
  | 'malformed';

/** An outbox row the relay gave up on, with what it met. */
export interface ParkedOutboxRow {
  /** The parked row's id: what `show`, `replay` and `delete` take. */
  readonly id: string;
  readonly messageId: string;
  readonly kind: string;
  readonly type: string;
  /** The message as the application's transaction recorded it (the encoded envelope). */
  readonly body: string;
  readonly partitionKey: string | undefined;
  readonly ordered: boolean;
  /** The outbox lane it held up. */
  readonly lane: number;
  readonly topic: string | undefined;
  /** ms since the epoch, when the message was to be delivered at a later time. */
  readonly deliverAt: number | undefined;
  readonly reason: ParkedOutboxReason;
  /** The code of the last error, when it was a HarrierError (`no-route`, ...). */
  readonly errorCode: string | undefined;
  /** The last error's message, or what is malformed. */
  readonly error: string;
  /** Failed tries that counted (outages never count). */
  readonly attempts: number;
  /** ms since the epoch. */
  readonly createdAt: number;
  readonly firstFailedAt: number;
  readonly lastFailedAt: number;
  readonly parkedAt: number;
}

/** Paging of {@link OutboxAdmin.listParked}. */
export interface ParkedOutboxPageOptions {
  /**
   * Most rows in one page.
   * @defaultValue 100
   */
  readonly limit?: number;
  /** The `next` cursor of the previous page. */
  readonly cursor?: string;
}

/** One page of parked outbox rows, oldest parked first. */
export interface ParkedOutboxPage {
  readonly rows: readonly ParkedOutboxRow[];
  /** Pass as `cursor` to get the next page; undefined on the last page. */
  readonly next: string | undefined;
}

/** Options of {@link OutboxAdmin.replayAllParked}. */
export interface ReplayAllParkedOptions {
  /** Called after each transaction with the rows moved back so far and the rows there were. */
  readonly onProgress?: (done: number, total: number) => void;
}

/**
 * What a tool reads and does on the parked rows of a transactional outbox: rows its relay gave up on
 * (see `maxAttempts` of `startOutboxRelay`), listed, shown, replayed or deleted.
 *
 * @remarks
 * `PostgresOutboxAdmin` (harrier/postgres) implements it. A system admin whose backend has an
 * outbox hands one out through its optional `outboxAdmin()`.
 */
export interface OutboxAdmin {
  /** How many rows are parked. */
  countParked(): Promise<number>;
  /**
   * A page of parked rows, oldest parked first.
   * @throws HarrierError `invalid-cursor` for a cursor this admin did not issue, `invalid-argument`
   *   for a limit that is not a whole number from 1 to 1000.
   */
  listParked(page?: ParkedOutboxPageOptions): Promise<ParkedOutboxPage>;
  /** The parked row `id`, or undefined when there is none. */
  getParked(id: string): Promise<ParkedOutboxRow | undefined>;
  /**
   * Moves the parked row `id` back into the outbox, at the end of its lane, with its tries reset;
   * the relay publishes it again. Resolves false when there is no such row.
   */
  replayParked(id: string): Promise<boolean>;
  /**
   * Moves every parked row back into the outbox, oldest parked first (so rows of one lane keep
   * their order), in transactions of 100 rows; resolves with how many it moved.
   */
  replayAllParked(options?: ReplayAllParkedOptions): Promise<number>;
  /** Deletes the parked row `id` for good; resolves false when there is no such row. */
  deleteParked(id: string): Promise<boolean>;
  /** Closes what this admin opened. */
  close(): Promise<void>;
}
