import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { holdClient, type HeldClient } from './held-client.js';

const TRY_LOCK = 'SELECT pg_try_advisory_lock($1::bigint) AS locked';
const UNLOCK = 'SELECT pg_advisory_unlock($1::bigint)';

/**
 * Whether two pools reach the same database of the same server.
 *
 * @remarks
 * The same pool does. Otherwise a session of `a` takes an advisory lock on a random key and a
 * session of `b` tries the same key: advisory locks are shared by every session of one database
 * and by no other, so `b` fails to take it exactly when both are on the same database, whatever
 * host names, ports or users the two connections were given.
 */
export async function sameDatabase(a: pg.Pool, b: pg.Pool): Promise<boolean> {
  if (a === b) return true;
  const first = await holdClient(a);
  let broken: Error | undefined;
  try {
    // A random 63-bit key: a clash with a lock of the application only makes this try another.
    for (let attempt = 1; attempt <= 5; attempt++) {
      const key = (randomBytes(8).readBigUInt64BE() >> 1n).toString();
      const held = await first.client.query<{ locked: boolean }>(TRY_LOCK, [key]);
      if (held.rows[0]?.locked !== true) continue;
      try {
        return !(await triedBy(b, key));
      } finally {
        await first.client.query(UNLOCK, [key]).catch((error: unknown) => {
          broken = error instanceof Error ? error : new Error(String(error));
        });
      }
    }
    throw new Error('Could not take a free advisory lock to compare two PostgreSQL connections');
  } finally {
    // A session whose lock could not be released is closed, which releases it.
    first.release(broken);
  }
}

/** Whether a session of `pool` takes (and then gives back) the advisory lock `key`. */
async function triedBy(pool: pg.Pool, key: string): Promise<boolean> {
  const held: HeldClient = await holdClient(pool);
  let broken: Error | undefined;
  try {
    const tried = await held.client.query<{ locked: boolean }>(TRY_LOCK, [key]);
    const locked = tried.rows[0]?.locked === true;
    if (locked) {
      await held.client.query(UNLOCK, [key]).catch((error: unknown) => {
        broken = error instanceof Error ? error : new Error(String(error));
      });
    }
    return locked;
  } finally {
    held.release(broken);
  }
}
