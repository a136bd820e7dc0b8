/**
 * The `error.type` of a failure: the `name` of an Error or of an `ErrorInfo` (what a dead letter
 * records), else the semantic conventions' fallback `_OTHER`.
 */
export function errorType(error: unknown): string {
  const name = typeof error === 'object' && error !== null ? (error as { name?: unknown }).name : undefined;
  return typeof name === 'string' && name !== '' ? name : '_OTHER';
}
