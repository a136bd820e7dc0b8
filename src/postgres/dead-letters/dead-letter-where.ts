import type { DeadLetterFilter } from '../../dead-letters/dead-letter-store.js';
import { searchPatternOf, storableText } from './dead-letter-search.js';

/**
 * The conditions of `filter` as SQL over the dead-letter table, its values appended to `values`
 * (numbered from `values.length + 1`): the reading of {@link DeadLetterFilter} that
 * `matchesDeadLetterFilter` makes, so the store selects what every other store selects.
 *
 * @returns the conditions joined with AND, `true` when there are none.
 */
export function deadLetterWhere(filter: DeadLetterFilter, values: unknown[]): string {
  const where: string[] = [];
  const add = (sql: (n: string) => string, value: unknown): void => {
    values.push(value);
    where.push(sql(`$${values.length}`));
  };
  const status = filter.status ?? 'dead';
  if (status !== 'any') add((n) => `status = ${n}`, status);
  for (const [column, value] of [
    ['endpoint', filter.endpoint],
    ['type', filter.type],
    ['handler', filter.handler],
    ['reason', filter.reason],
    ['fingerprint', filter.fingerprint],
  ] as const) {
    if (value !== undefined) add((n) => `${column} = ${n}`, storableText(value));
  }
  if (filter.since !== undefined) add((n) => `last_failed_at >= ${n}`, filter.since);
  if (filter.until !== undefined) add((n) => `last_failed_at < ${n}`, filter.until);
  if (filter.text !== undefined && filter.text !== '') {
    add((n) => `search LIKE ${n}`, searchPatternOf(filter.text ?? ''));
  }
  return where.length === 0 ? 'true' : where.join(' AND ');
}
