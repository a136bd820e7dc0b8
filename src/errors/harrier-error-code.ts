/**
 * Every code a {@link HarrierError} carries, in alphabetical order; docs/errors.md says what raises
 * each one and how to fix it.
 *
 * @remarks
 * The set is closed: a new code is added here and to docs/errors.md (a unit test checks the page
 * lists every code), so codes stay one spelling per meaning.
 */
export const HARRIER_ERROR_CODES = [
  'admin-closed',
  'append-failed',
  'broker-closed',
  'bus-stopped',
  'dead-letter-corrupt',
  'duplicate-handler',
  'foreign-container',
  'handler-timeout',
  'internal',
  'invalid-argument',
  'invalid-cursor',
  'invalid-definition',
  'invalid-handler',
  'invalid-key',
  'invalid-option',
  'invalid-partition',
  'invalid-topic',
  'lock-lost',
  'log-closed',
  'log-corrupt',
  'log-locked',
  'message-in-flight',
  'missing-dependency',
  'no-handler',
  'no-route',
  'no-transaction',
  'not-caught-up',
  'not-idle',
  'not-registered',
  'not-supported',
  'partition-failed',
  'partition-mismatch',
  'postgres-unavailable',
  'projection-publish',
  'projection-rebuilt',
  'publish-failed',
  'rabbitmq-unavailable',
  'redis-command-failed',
  'redis-unavailable',
  'resolution-failed',
  'saga-completed',
  'saga-conflict',
  'saga-corrupt',
  'saga-not-found',
  'schema-conflict',
  'schema-outdated',
  'settle-timeout',
  'stale-delivery',
  'stopping',
  'store-closed',
  'too-large',
  'transaction-aborted',
  'transient',
  'unknown-projection',
  'unknown-topic',
  'unrecoverable',
  'unsupported-decorators',
  'unsupported-server',
  'validation-failed',
  'version-unsupported',
  'weak-key',
  'wrong-kind',
] as const;

/** A code of a {@link HarrierError}: one of {@link HARRIER_ERROR_CODES}. */
export type HarrierErrorCode = (typeof HARRIER_ERROR_CODES)[number];

/**
 * Former spellings of codes, each with the code that replaced it.
 *
 * @remarks
 * Harrier threw these before the codes were made one spelling per meaning. `HarrierError.is(error,
 * alias)` still matches an error with the new code (and `HarrierError.is(error, code)` an error from
 * an older copy that threw the alias), so code that matched on the old spelling keeps working.
 * Comparing `error.code === alias` does not: match with `HarrierError.is`.
 */
export const HARRIER_ERROR_CODE_ALIASES = {
  'corrupt-dead-letter': 'dead-letter-corrupt',
  'corrupt-log': 'log-corrupt',
  'invalid-options': 'invalid-option',
} as const satisfies Readonly<Record<string, HarrierErrorCode>>;

/** A former spelling of a code, still accepted by `HarrierError.is` (see {@link HARRIER_ERROR_CODE_ALIASES}). */
export type HarrierErrorCodeAlias = keyof typeof HARRIER_ERROR_CODE_ALIASES;

/** The current code for `code`: itself, or the code an alias stands for. */
export function canonicalErrorCode(code: string): string {
  return Object.hasOwn(HARRIER_ERROR_CODE_ALIASES, code)
    ? HARRIER_ERROR_CODE_ALIASES[code as HarrierErrorCodeAlias]
    : code;
}
