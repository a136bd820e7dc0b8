import type { DeadLetterFilter, DeadLetterRecord } from './dead-letter-store.js';

/**
 * Whether `record` is selected by `filter`: every field set in the filter must match, and the status
 * defaults to `dead`.
 *
 * @remarks
 * The one reading of {@link DeadLetterFilter} every store applies, so a filter selects the same
 * records whichever store holds them.
 */
export function matchesDeadLetterFilter(record: DeadLetterRecord, filter: DeadLetterFilter): boolean {
  const status = filter.status ?? 'dead';
  return (
    (status === 'any' || record.status === status) &&
    (filter.endpoint === undefined || record.endpoint === filter.endpoint) &&
    (filter.type === undefined || record.type === filter.type) &&
    (filter.handler === undefined || record.handler === filter.handler) &&
    (filter.reason === undefined || record.reason === filter.reason) &&
    (filter.fingerprint === undefined || record.fingerprint === filter.fingerprint) &&
    (filter.since === undefined || record.lastFailedAt >= filter.since) &&
    (filter.until === undefined || record.lastFailedAt < filter.until) &&
    (filter.text === undefined || containsText(record, filter.text.toLowerCase()))
  );
}

/** Whether the record's last error (message, stack) or its envelope contains `needle` (lower case). */
function containsText(record: DeadLetterRecord, needle: string): boolean {
  return (
    record.error.message.toLowerCase().includes(needle) ||
    (record.error.stack?.toLowerCase().includes(needle) ?? false) ||
    record.envelope.toLowerCase().includes(needle)
  );
}

/**
 * Whether `filter` selects every record whatever its fields (status `any`, nothing else set), so a
 * store can answer a count from its index alone.
 */
export function selectsEveryDeadLetter(filter: DeadLetterFilter): boolean {
  return (
    filter.status === 'any' &&
    filter.endpoint === undefined &&
    filter.type === undefined &&
    filter.handler === undefined &&
    filter.reason === undefined &&
    filter.fingerprint === undefined &&
    filter.since === undefined &&
    filter.until === undefined &&
    filter.text === undefined
  );
}
