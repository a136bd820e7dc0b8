import { HarrierError } from '../../errors/harrier-error.js';

const CURSOR_PREFIX = 'rdl1:';

/** The cursor of the list page that starts after the index entry of sequence `seq`. */
export function encodeListCursor(seq: number): string {
  return Buffer.from(`${CURSOR_PREFIX}${seq}`, 'utf8').toString('base64url');
}

/**
 * The sequence a list cursor starts after.
 * @throws HarrierError `invalid-cursor` for a cursor {@link encodeListCursor} did not make.
 */
export function decodeListCursor(cursor: string): number {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const digits = text.startsWith(CURSOR_PREFIX) ? text.slice(CURSOR_PREFIX.length) : '';
  const seq = Number(digits);
  if (!/^\d+$/.test(digits) || !Number.isSafeInteger(seq)) {
    throw new HarrierError(
      'invalid-cursor',
      `Dead-letter cursor "${cursor}" was not issued by this store: pass the \`next\` of the previous page, or no cursor to start from the first page`,
    );
  }
  return seq;
}
