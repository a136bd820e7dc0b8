import { HarrierError } from '../errors/harrier-error.js';

/** Default of the `schema` option of every PostgreSQL part: Harrier's tables live in `harrier`. */
export const DEFAULT_POSTGRES_SCHEMA = 'harrier';

/**
 * The longest schema name: the outbox's NOTIFY channel is `harrier_outbox_<schema>` (15 + 48
 * bytes), and PostgreSQL identifiers, channel names included, stop at 63 bytes.
 */
export const MAX_SCHEMA_NAME_LENGTH = 48;

const SCHEMA_NAME = new RegExp(`^[a-z_][a-z0-9_]{0,${MAX_SCHEMA_NAME_LENGTH - 1}}$`);

/**
 * The quoted names of Harrier's tables in one schema.
 *
 * @remarks
 * The schema name is checked, not escaped: it is spliced into SQL text (identifiers cannot be
 * query parameters), so only lower-case letters, digits and `_` are accepted, at most
 * {@link MAX_SCHEMA_NAME_LENGTH} of them.
 */
export interface PostgresTables {
  readonly schema: string;
  /** `"<schema>"`, quoted. */
  readonly quotedSchema: string;
  readonly migrations: string;
  readonly outbox: string;
  readonly inbox: string;
  readonly checkpoints: string;
  readonly sagas: string;
  /** The PostgreSQL broker's messages (`PostgresBroker`). */
  readonly queue: string;
  /** The PostgreSQL broker's subscriptions and command routes. */
  readonly routes: string;
  /** The PostgreSQL broker's published ids, for idempotent publish. */
  readonly dedupe: string;
  /** The PostgreSQL broker's take, a function (see migration 2). */
  readonly queueTake: string;
  /** Outbox rows the relay gave up on (`maxAttempts` failed tries, or malformed), kept for replay. */
  readonly outboxParked: string;
  /** The dead letters of `PostgresDeadLetterStore`, one row per record. */
  readonly deadLetters: string;
  /** The sequence that orders dead-letter writes (a failure group's sample is its latest write). */
  readonly deadLetterWrites: string;
  /** The schema-qualified name of the trigram index of dead-letter text search, when it exists. */
  readonly deadLetterSearchIndex: string;
  /** Each projection's generation and rebuild marker. */
  readonly projectionGenerations: string;
  /** The recurring schedules of `PostgresScheduleStore` (`bus.every`). */
  readonly schedules: string;
  /** The token each queue delivers per message id (`PostgresDeliveryLedger`). */
  readonly ledgerClaims: string;
  /** The copies of scheduled messages, for `cancel` (`PostgresDeliveryLedger`). */
  readonly ledgerCopies: string;
  /** The latest loss of each queue's copy in an outage (`PostgresDeliveryLedger.lost`). */
  readonly ledgerLosses: string;
  /** `PostgresDeliveryLedger.admit`, a function (see migration 9). */
  readonly ledgerAdmit: string;
}

/**
 * The tables of `schema` (default `harrier`).
 * @throws HarrierError `invalid-option` for a name that is not a plain lower-case identifier of at
 *   most 48 characters.
 */
export function postgresTables(schema: string = DEFAULT_POSTGRES_SCHEMA): PostgresTables {
  if (!SCHEMA_NAME.test(schema)) {
    throw new HarrierError(
      'invalid-option',
      `PostgreSQL schema name ${JSON.stringify(schema)} is not a plain identifier: use lower-case letters, digits and _ (at most ${MAX_SCHEMA_NAME_LENGTH}, since the outbox's NOTIFY channel harrier_outbox_<schema> must fit PostgreSQL's 63-byte identifier limit; not starting with a digit), e.g. 'harrier' or 'orders_harrier'`,
    );
  }
  const q = `"${schema}"`;
  return {
    schema,
    quotedSchema: q,
    migrations: `${q}.migrations`,
    outbox: `${q}.outbox`,
    inbox: `${q}.inbox`,
    checkpoints: `${q}.checkpoints`,
    sagas: `${q}.sagas`,
    queue: `${q}.queue`,
    routes: `${q}.routes`,
    dedupe: `${q}.dedupe`,
    queueTake: `${q}.queue_take`,
    outboxParked: `${q}.outbox_parked`,
    deadLetters: `${q}.dead_letters`,
    deadLetterWrites: `${q}.dead_letter_writes`,
    deadLetterSearchIndex: `${q}.dead_letters_search_trgm`,
    projectionGenerations: `${q}.projection_generations`,
    schedules: `${q}.schedules`,
    ledgerClaims: `${q}.ledger_claims`,
    ledgerCopies: `${q}.ledger_copies`,
    ledgerLosses: `${q}.ledger_losses`,
    ledgerAdmit: `${q}.ledger_admit`,
  };
}
