import { Cron } from 'croner';
import { HarrierError } from '../errors/harrier-error.js';
import type { ScheduleTiming } from './schedule-record.js';

/** The tick times of one schedule: the next after a time, the latest at or before one. */
export interface ScheduleTicks {
  /** The first tick strictly after `afterMs`, or undefined when the pattern never fires again. */
  next(afterMs: number): number | undefined;
  /** The latest tick at or before `atMs`, or undefined when there is none. */
  latest(atMs: number): number | undefined;
}

/** Smallest interval `every` takes, in ms. */
export const MIN_EVERY_MS = 10;

/**
 * The ticks of `timing`.
 *
 * @throws HarrierError `invalid-option` for a malformed pattern, an unknown time zone, or an
 * interval that is not a whole number of ms of at least {@link MIN_EVERY_MS}.
 */
export function scheduleTicks(name: string, timing: ScheduleTiming): ScheduleTicks {
  if ('everyMs' in timing) {
    const everyMs = timing.everyMs;
    if (!Number.isSafeInteger(everyMs) || everyMs < MIN_EVERY_MS) {
      throw new HarrierError(
        'invalid-option',
        `Schedule "${name}" has everyMs ${String(everyMs)}: pass a whole number of ms of at least ${MIN_EVERY_MS}`,
      );
    }
    return {
      next: (afterMs) => (Math.floor(afterMs / everyMs) + 1) * everyMs,
      latest: (atMs) => Math.floor(atMs / everyMs) * everyMs,
    };
  }
  if (typeof timing.cron !== 'string') {
    throw new HarrierError(
      'invalid-option',
      `Schedule "${name}" needs { cron: string, timeZone?: string } or { everyMs: number }`,
    );
  }
  const timeZone = timing.timeZone ?? 'UTC';
  try {
    new Intl.DateTimeFormat('en', { timeZone });
  } catch (cause) {
    throw new HarrierError(
      'invalid-option',
      `Schedule "${name}" has time zone ${JSON.stringify(timeZone)}: pass an IANA name such as "Europe/Berlin"`,
      { cause },
    );
  }
  let cron: Cron;
  try {
    cron = new Cron(timing.cron, { timezone: timeZone, paused: true });
  } catch (cause) {
    throw new HarrierError(
      'invalid-option',
      `Schedule "${name}" has cron ${JSON.stringify(timing.cron)}, which croner cannot read (${cause instanceof Error ? cause.message : String(cause)}): pass 5 fields (minute hour day month weekday) or 6 (seconds first)`,
      { cause },
    );
  }
  return {
    next: (afterMs) => cron.nextRun(new Date(afterMs))?.getTime(),
    latest: (atMs) => cron.previousRuns(1, new Date(atMs + 1))[0]?.getTime(),
  };
}
