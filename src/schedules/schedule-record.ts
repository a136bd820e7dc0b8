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

/** Why the send of a schedule's tick failed, and when. */
export interface ScheduleTickError {
  /** The error's message (`Redis is unreachable ...`). */
  readonly message: string;
  /** When the send failed, ms since the epoch. */
  readonly at: number;
}

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
  /** The id of the message the last tick sent, or undefined before the first. */
  readonly lastMessageId?: string | undefined;
  /**
   * Why the send of a tick after `lastTickAt` failed (the broker was down), or undefined when the
   * last tick tried was sent; cleared when a later tick is recorded.
   */
  readonly lastError?: ScheduleTickError | undefined;
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

/** The JSON text a store keeps for a record's definition: all but its name, ticks and outcome. */
export function encodeScheduleDefinition(record: ScheduleRecord): string {
  const {
    name: _name,
    lastTickAt: _last,
    nextRunAt: _next,
    lastMessageId: _message,
    lastError: _error,
    ...definition
  } = record;
  return JSON.stringify(definition);
}

/** What a store keeps beside a record's definition: its ticks and the last tick's outcome. */
export interface ScheduleTickState {
  readonly lastTickAt: number | undefined;
  readonly nextRunAt: number | undefined;
  readonly lastMessageId?: string | undefined;
  readonly lastError?: ScheduleTickError | undefined;
}

/** The JSON text of a tick error, as the Redis and PostgreSQL stores keep it. */
export function encodeScheduleTickError(error: ScheduleTickError): string {
  return JSON.stringify({ message: error.message, at: error.at });
}

/** A tick error from its JSON text, or undefined when the text is not one (never throws). */
export function decodeScheduleTickError(json: string | null | undefined): ScheduleTickError | undefined {
  if (json === null || json === undefined || json === '') return undefined;
  try {
    const parsed: unknown = JSON.parse(json);
    if (typeof parsed !== 'object' || parsed === null) return undefined;
    const { message, at } = parsed as { message?: unknown; at?: unknown };
    if (typeof message !== 'string' || typeof at !== 'number') return undefined;
    return { message, at };
  } catch {
    return undefined;
  }
}

/**
 * A record from what a store keeps ({@link encodeScheduleDefinition}'s text, the ticks and outcome), or
 * undefined when the text is not a definition (never throws on what a store returns).
 */
export function decodeScheduleRecord(
  name: string,
  json: string | null | undefined,
  ticks: ScheduleTickState,
): ScheduleRecord | undefined {
  if (json === null || json === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const fields = parsed as Partial<Record<keyof ScheduleRecord, unknown>>;
  if ((fields.kind !== 'command' && fields.kind !== 'event') || typeof fields.type !== 'string')
    return undefined;
  return {
    name,
    kind: fields.kind,
    type: fields.type,
    payload: fields.payload,
    cron: typeof fields.cron === 'string' ? fields.cron : undefined,
    timeZone: typeof fields.timeZone === 'string' ? fields.timeZone : undefined,
    everyMs: typeof fields.everyMs === 'number' ? fields.everyMs : undefined,
    catchUp: fields.catchUp === 'none' ? 'none' : 'one',
    lastTickAt: ticks.lastTickAt,
    nextRunAt: ticks.nextRunAt,
    lastMessageId: ticks.lastMessageId,
    lastError: ticks.lastError,
    updatedAt: typeof fields.updatedAt === 'number' ? fields.updatedAt : 0,
  };
}
