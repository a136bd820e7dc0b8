/**
 * Resolves true when `promise` settles (resolved or rejected, its value ignored) within `ms` of wall
 * time, false once the time has run out. Leaves no timer behind.
 *
 * @remarks
 * Wall time even under a test clock: callers use it to bound how long a real process waits.
 */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      new Promise<false>((resolve) => {
        timer = setTimeout(() => {
          resolve(false);
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Settles as `promise` does, or rejects with `onTimeout()` when it has not settled within `ms` of wall
 * time. Leaves no timer behind.
 */
export async function withDeadline<T>(promise: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          reject(onTimeout());
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
