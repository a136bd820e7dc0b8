/**
 * Calls `fn` for 0 to `count - 1`, at most `limit` at a time; waits for every call, then throws the
 * first error, if any.
 */
export async function forEachLimited(
  count: number,
  limit: number,
  fn: (index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const errors: unknown[] = [];
  const worker = async (): Promise<void> => {
    while (next < count) {
      const index = next++;
      try {
        await fn(index);
      } catch (error) {
        errors.push(error);
        next = count;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  if (errors.length > 0) throw errors[0];
}
