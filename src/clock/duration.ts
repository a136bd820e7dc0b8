const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$/;
const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/**
 * A short duration such as `90s`, `15m`, `1h`, `2d` or `1w` (also `ms`, decimals allowed) in
 * milliseconds, or undefined when `text` is not one. Used by time windows (`--since 1h`).
 */
export function durationMs(text: string): number | undefined {
  const match = DURATION.exec(text);
  if (match === null) return undefined;
  return Number(match[1]) * (UNIT_MS[match[2] ?? ''] ?? 0);
}
