import { describe, expect, it } from 'vitest';
import { parseWhen } from '../../../src/cli/cli-context.js';
import { durationMs } from '../../../src/clock/duration.js';

describe('durationMs', () => {
  it.each([
    ['250ms', 250],
    ['90s', 90_000],
    ['15m', 900_000],
    ['1.5h', 5_400_000],
    ['2d', 172_800_000],
    ['1w', 604_800_000],
  ])('reads %s', (text, ms) => {
    expect(durationMs(text)).toBe(ms);
  });

  it.each(['', '1', 'h', '1y', '-1h', '1 h', '2026-01-31'])('refuses %j', (text) => {
    expect(durationMs(text)).toBeUndefined();
  });
});

describe('parseWhen (the CLI’s --since/--until)', () => {
  const now = Date.UTC(2026, 0, 31, 12);

  it('takes a duration before now or an ISO date', () => {
    expect(parseWhen('since', '1h', now)).toBe(now - 3_600_000);
    expect(parseWhen('since', '2026-01-30T00:00:00Z', now)).toBe(Date.UTC(2026, 0, 30));
  });

  it('names the option and the formats for anything else', () => {
    expect(() => parseWhen('until', 'soon', now)).toThrow(/--until "soon" is neither an ISO date/);
  });
});
