import type { DeadLetterRecord } from '../../dead-letters/dead-letter-store.js';

/** Separates the fields of the search text; {@link searchable} keeps it out of every field. */
const FIELD_SEPARATOR = '\u0001';

/** `text` lower-cased as JavaScript does (as every store compares), NUL and U+0001 replaced by U+FFFD. */
function searchable(text: string): string {
  // NUL (text cannot hold it) and the field separator, replaced in fields and needles alike.
  return text.toLowerCase().replaceAll('\u0000', '\uFFFD').replaceAll(FIELD_SEPARATOR, '\uFFFD');
}

/**
 * The `search` column of a record: its last error's message and stack and its envelope, lower-cased
 * in JavaScript, so a search matches what `matchesDeadLetterFilter` matches whatever the database's
 * locale (PostgreSQL's `lower()` under the C locale leaves `É` as it is).
 */
export function searchTextOf(record: DeadLetterRecord): string {
  return [record.error.message, record.error.stack ?? '', record.envelope]
    .map(searchable)
    .join(FIELD_SEPARATOR);
}

/**
 * The LIKE pattern that finds `text` inside a `search` column: lower-cased as the column is, with
 * LIKE's wildcards and escape character escaped; it cannot span two fields, since no needle holds
 * the separator.
 */
export function searchPatternOf(text: string): string {
  return `%${searchable(text).replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** `text` as a text column holds it: NUL replaced by U+FFFD (filters compare the same way). */
export function storableText(text: string): string {
  return text.replaceAll('\u0000', '\uFFFD');
}
