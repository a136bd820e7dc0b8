/**
 * The payload version of the message a dead letter holds, read from its envelope: the envelope's
 * `ver`, or 1 when it has none; `null` when the bytes are not a JSON object or `ver` is not a
 * whole number of at least 1, so no version can be told.
 */
export function deadLetterVersion(envelope: string): number | null {
  let value: unknown;
  try {
    value = JSON.parse(envelope);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const ver = (value as { ver?: unknown }).ver;
  if (ver === undefined) return 1;
  return Number.isSafeInteger(ver) && (ver as number) >= 1 ? (ver as number) : null;
}
