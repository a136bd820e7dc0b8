/** When a recurring schedule ticks: a cron pattern (in a time zone) or a fixed interval. */
export type ScheduleTiming =
  | {
      /** A cron pattern of 5 fields (minute first) or 6 (seconds first), as croner reads it. */
      readonly cron: string;
      /**
       * The IANA time zone the pattern is read in (`Europe/Berlin`).
       * @defaultValue `UTC`
       */
      readonly timeZone?: string;
    }
  | {
      /** Milliseconds between ticks; ticks fall on multiples of it since the Unix epoch. */
      readonly everyMs: number;
    };

/**
 * What to do at start with a tick that fell due while no process ran the schedule: `'one'` sends the
 * latest missed tick once, `'none'` skips every missed tick.
 */
export type CatchUp = 'one' | 'none';

/** A recurring schedule as a {@link ScheduleStore} keeps it. */
export interface ScheduleRecord {
  /** The schedule's name, unique in its store. */
  readonly name: string;
  /** `command` or `event`: how each tick's message is sent. */
  readonly kind: 'command' | 'event';
  /** The message type each tick sends (`billing.CloseDay`). */
  readonly type: string;
  /** The payload each tick sends, as given to `every` (JSON). */
  readonly payload: unknown;
  /** The cron pattern, or undefined for an interval. */
  readonly cron?: string | undefined;
  /** The time zone of `cron`. */
  readonly timeZone?: string | undefined;
  /** The interval in ms, or undefined for a cron pattern. */
  readonly everyMs?: number | undefined;
  /** What a start does with a tick missed while no process ran. */
  readonly catchUp: CatchUp;
  /** The time (ms since the epoch) of the last tick sent, or undefined before the first. */
  readonly lastTickAt?: number | undefined;
  /** The time of the next tick. */
  readonly nextRunAt?: number | undefined;
  /** When `every` last stored it. */
  readonly updatedAt: number;
}

/** The part of a record that, when it changes, makes it a new schedule (missed ticks forgotten). */
export function specKeyOf(
  record: Pick<ScheduleRecord, 'kind' | 'type' | 'payload' | 'cron' | 'timeZone' | 'everyMs'>,
): string {
  return JSON.stringify([
    record.kind,
    record.type,
    record.cron ?? null,
    record.timeZone ?? null,
    record.everyMs ?? null,
    record.payload ?? null,
  ]);
}
