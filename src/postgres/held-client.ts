import type pg from 'pg';

/** A client checked out of a pool, with an `'error'` listener for as long as it is held. */
export interface HeldClient {
  readonly client: pg.PoolClient;
  /** What the client emitted while held: its connection is gone (the server ended the session). */
  readonly lost: Error | undefined;
  /**
   * Gives the client back: destroyed when it emitted an error or `broken` is given, else returned
   * to the pool. Call it once.
   */
  release(broken?: Error | boolean): void;
}

/**
 * Checks a client out of `pool` and listens for its `'error'` until it is released.
 *
 * @remarks
 * pg-pool listens for the errors of idle clients only: a checked-out client whose server ends the
 * session (`pg_terminate_backend`, a restart, a failover) emits `'error'` with no listener, which
 * crashes the process, however the pool is set up. The error is kept (see {@link HeldClient.lost})
 * so the caller's next statement fails as a lost connection, and the client is destroyed on release
 * rather than handed to the next caller.
 *
 * The listener is attached in the pool's callback, in the turn the pool stops listening: a session
 * ended as it opened arrives in the same read as its first ReadyForQuery, before the continuation
 * of an awaited `pool.connect()` could attach one.
 * @param onLost - called once with the error the client emitted while held
 */
export function holdClient(pool: pg.Pool, onLost?: (error: Error) => void): Promise<HeldClient> {
  return new Promise((resolve, reject) => {
    pool.connect((error, client) => {
      if (client === undefined) {
        reject(error ?? new Error('pg Pool.connect gave neither a client nor an error'));
        return;
      }
      resolve(hold(client, onLost));
    });
  });
}

function hold(client: pg.PoolClient, onLost: ((error: Error) => void) | undefined): HeldClient {
  let lost: Error | undefined;
  const listener = (error: Error): void => {
    if (lost !== undefined) return;
    lost = error;
    onLost?.(error);
  };
  client.on('error', listener);
  let released = false;
  return {
    client,
    get lost() {
      return lost;
    },
    release(broken) {
      if (released) return;
      released = true;
      const destroy = lost ?? (broken === false ? undefined : broken);
      client.release(destroy);
      // Removed after the release, which attaches the pool's own listener: never a moment without one.
      client.removeListener('error', listener);
    },
  };
}
