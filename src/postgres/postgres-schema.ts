import { HarrierError } from '../errors/harrier-error.js';

/** Default of the `schema` option of every PostgreSQL part: Harrier's tables live in `harrier`. */
export const DEFAULT_POSTGRES_SCHEMA = 'harrier';

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * The quoted names of Harrier's tables in one schema.
 *
 * @remarks
 * The schema name is checked, not escaped: it is spliced into SQL text (identifiers cannot be
 * query parameters), so only lower-case letters, digits and `_` are accepted.
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
}

/**
 * The tables of `schema` (default `harrier`).
 * @throws HarrierError `invalid-option` for a name that is not a plain lower-case identifier.
 */
export function postgresTables(schema: string = DEFAULT_POSTGRES_SCHEMA): PostgresTables {
  if (!SCHEMA_NAME.test(schema)) {
    throw new HarrierError(
      'invalid-option',
      `PostgreSQL schema name ${JSON.stringify(schema)} is not a plain identifier: use lower-case letters, digits and _ (at most 63, not starting with a digit), e.g. 'harrier' or 'orders_harrier'`,
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
  };
}
