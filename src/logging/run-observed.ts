/**
 * Runs `work` through an observer's wrapper (a tracing span, a timer) so that a failing observer
 * never changes the work's outcome, never skips it and never runs it twice.
 *
 * @remarks
 * The observer gets `run`, which starts the work once however often it is called. Whatever the
 * observer does, the result is the work's own: its value, or its error. An error of the observer
 * itself (thrown before or after the work, or a wrapper that never calls `run`) goes to
 * `onObserverError`, and the work runs without it.
 */
export async function runObserved<T>(
  around: (run: () => Promise<T>) => Promise<unknown>,
  work: () => Promise<T>,
  onObserverError: (error: unknown) => void,
): Promise<T> {
  let running: Promise<T> | undefined;
  const run = (): Promise<T> => (running ??= work());
  try {
    await around(run);
  } catch (error) {
    if (running !== undefined) {
      // The work's own failure wins (the observer most likely passed it on); else the observer
      // failed after the work succeeded.
      const result = await running;
      onObserverError(error);
      return result;
    }
    onObserverError(error);
  }
  return run();
}
