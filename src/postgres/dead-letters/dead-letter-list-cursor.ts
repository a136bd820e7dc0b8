import { HarrierError } from '../../errors/harrier-error.js';

const CURSOR_PREFIX = 'pdl1:';

/** The cursor of the list page that starts after the row of insertion sequence `seq`. */
export function encodeDeadLetterListCursor(seq: string): string {
  return Buffer.from(`${CURSOR_PREFIX}${seq}`, 'utf8').toString('base64url');
}

/**
 * The insertion sequence a list cursor starts after, as decimal text (a bigint).
 * @throws HarrierError `invalid-cursor` for a cursor {@link encodeDeadLetterListCursor} did not make.
 */
export function decodeDeadLetterListCursor(cursor: string): string {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const digits = text.startsWith(CURSOR_PREFIX) ? text.slice(CURSOR_PREFIX.length) : '';
  if (!/^\d{1,18}$/.test(digits)) {
    throw new HarrierError(
      'invalid-cursor',
      `Dead-letter cursor "${cursor}" was not issued by this store: pass the \`next\` of the previous page, or no cursor to start from the first page`,
    );
  }
  return digits;
}
