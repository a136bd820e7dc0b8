import type { Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import { withArticle } from '../errors/with-article.js';
import type { SendOptions } from '../handlers/message-context.js';
import type { Logger } from '../logging/logger.js';
import type { CommandDefinition, EventDefinition } from '../messages/definition.js';
import { deterministicUuidV7 } from '../messages/uuid-v7.js';
import { specKeyOf, type CatchUp, type ScheduleRecord, type ScheduleTiming } from './schedule-record.js';
import type { ScheduleStore } from './schedule-store.js';
import { scheduleTicks, type ScheduleTicks } from './schedule-ticks.js';

/** Options of `every`. */
export interface EveryOptions {
  /**
   * What a start does with a tick that fell due while no process ran the schedule: `'one'` sends
   * the latest missed tick once, `'none'` skips every missed tick.
   * @defaultValue `'one'`
   */
  readonly catchUp?: CatchUp;
}

/** Header naming the schedule on every message a tick sends. */
export const SCHEDULE_HEADER = 'harrier-schedule';
/** Header carrying the tick's time (ISO 8601, UTC) on every message a tick sends. */
export const SCHEDULE_TICK_HEADER = 'harrier-schedule-tick';

/** Longest single timer; a later tick is reached by re-arming (Node's timers stop at 2^31 - 1 ms). */
const MAX_TIMER_MS = 3_600_000;
/** Wait before a tick whose send failed is tried again (never past the next tick). */
const RETRY_MS = 5_000;
/**
 * How late a tick may fire and still be sent in turn (a busy event loop, a process paused for a
 * moment); a tick later than this counts as missed, and `catchUp` decides.
 */
export const MAX_LATE_MS = 60_000;

/** The id of the message of the tick of `tickAt` of schedule `name`: the same in every process. */
export function tickMessageId(name: string, tickAt: number): string {
  return deterministicUuidV7(`harrier.schedule\u0000${name}\u0000${tickAt}`, tickAt);
}

/** What {@link RecurringSchedules} needs from its bus. */
export interface RecurringSchedulesOptions {
  readonly store: ScheduleStore;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Sends a command or publishes an event as the bus does. */
  send(
    definition: CommandDefinition | EventDefinition,
    payload: unknown,
    options: SendOptions,
  ): Promise<string>;
  /** Validates a payload as `send` would, throwing what `send` throws. */
  check(definition: CommandDefinition | EventDefinition, payload: unknown): void;
}

interface Local {
  readonly name: string;
  definition: CommandDefinition | EventDefinition;
  payload: unknown;
  ticks: ScheduleTicks;
  specKey: string;
  catchUp: CatchUp;
  cancelTimer: (() => void) | undefined;
  /** The tick the timer is armed for (undefined: the latest due when it fires). */
  plannedAt: number | undefined;
  /** The tick in progress, so stop() can wait for it. */
  running: Promise<void> | undefined;
}

/**
 * The recurring schedules of one bus: stores them, and on each tick sends one message whose id is
 * derived from the schedule's name and the tick's time.
 *
 * @remarks
 * Every process that runs a schedule sends each tick with the same id, and the broker's idempotent
 * publish drops all but the first: one tick, one message, however many processes run it. The
 * store's last tick lets a start send (or skip) a tick missed while no process ran, and spares the
 * broker the copies of processes that come second.
 */
export class RecurringSchedules {
  readonly #options: RecurringSchedulesOptions;
  readonly #local = new Map<string, Local>();
  #started = false;

  constructor(options: RecurringSchedulesOptions) {
    this.#options = options;
  }

  /** The names of the schedules this bus runs. */
  names(): string[] {
    return [...this.#local.keys()].sort();
  }

  /**
   * Stores the schedule `name` (replacing one of that name) and runs it while the bus runs.
   *
   * @throws HarrierError `invalid-option` / `wrong-kind`, MessageValidationError for the payload.
   */
  async every(
    name: string,
    timing: ScheduleTiming,
    definition: CommandDefinition | EventDefinition,
    payload: unknown,
    options: EveryOptions = {},
  ): Promise<void> {
    if (typeof name !== 'string' || name.length === 0 || name.length > 200) {
      throw new HarrierError(
        'invalid-option',
        `every needs a schedule name of 1 to 200 characters, got ${JSON.stringify(name)}`,
      );
    }
    if (
      (definition as { kind?: unknown }).kind !== 'command' &&
      (definition as { kind?: unknown }).kind !== 'event'
    ) {
      throw new HarrierError(
        'wrong-kind',
        `every takes a command or an event, but "${String((definition as { type?: unknown }).type)}" is ${withArticle(String((definition as { kind?: unknown }).kind))}`,
      );
    }
    if (definition.dedupe === 'while-queued') {
      throw new HarrierError(
        'invalid-option',
        `every cannot send "${definition.type}": its dedupe is 'while-queued', so a second process's copy of a tick handled already would be delivered again; define it with dedupe 'window' (the default)`,
      );
    }
    const catchUp: unknown = options.catchUp ?? 'one';
    if (catchUp !== 'one' && catchUp !== 'none') {
      throw new HarrierError(
        'invalid-option',
        `Schedule "${name}" has catchUp ${JSON.stringify(catchUp)}: use 'one' or 'none'`,
      );
    }
    const ticks = scheduleTicks(name, timing);
    this.#options.check(definition, payload);
    const now = this.#options.clock.now();
    const spec = {
      name,
      kind: definition.kind,
      type: definition.type,
      payload,
      cron: 'cron' in timing ? timing.cron : undefined,
      timeZone: 'cron' in timing ? (timing.timeZone ?? 'UTC') : undefined,
      everyMs: 'everyMs' in timing ? timing.everyMs : undefined,
    };
    const specKey = specKeyOf(spec);
    const stored = await this.#options.store.get(name);
    const same = stored !== undefined && specKeyOf(stored) === specKey;
    await this.#options.store.put({
      ...spec,
      catchUp,
      lastTickAt: same ? stored.lastTickAt : undefined,
      nextRunAt: ticks.next(now),
      lastMessageId: same ? stored.lastMessageId : undefined,
      lastError: same ? stored.lastError : undefined,
      updatedAt: now,
    });
    this.#drop(name);
    const local: Local = {
      name,
      definition,
      payload,
      ticks,
      specKey,
      catchUp,
      cancelTimer: undefined,
      plannedAt: undefined,
      running: undefined,
    };
    this.#local.set(name, local);
    if (this.#started) await this.#activate(local, same ? stored.lastTickAt : undefined);
  }

  /** Stops running the schedule `name` here and removes it from the store; true when there was one. */
  async cancel(name: string): Promise<boolean> {
    const here = this.#drop(name);
    const stored = await this.#options.store.delete(name);
    return here || stored;
  }

  /** Runs every schedule registered so far, sending (or skipping) the ticks missed while stopped. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    for (const local of this.#local.values()) {
      const stored = await this.#options.store.get(local.name);
      if (stored === undefined || specKeyOf(stored) !== local.specKey) {
        // Cancelled or replaced since `every` ran here: the store's word wins.
        this.#adopt(local, stored);
        continue;
      }
      await this.#activate(local, stored.lastTickAt);
    }
  }

  /** Stops every timer and waits for the ticks in progress. */
  async stop(): Promise<void> {
    this.#started = false;
    const running: Promise<void>[] = [];
    for (const local of this.#local.values()) {
      local.cancelTimer?.();
      local.cancelTimer = undefined;
      if (local.running !== undefined) running.push(local.running);
    }
    await Promise.all(running);
  }

  /** Arms `local`, after sending the missed tick when it catches up (resolving once it is sent). */
  #activate(local: Local, lastTickAt: number | undefined): Promise<void> {
    const now = this.#options.clock.now();
    const latest = local.ticks.latest(now);
    if (local.catchUp === 'one' && lastTickAt !== undefined && latest !== undefined && latest > lastTickAt) {
      local.plannedAt = undefined;
      return this.#run(local);
    }
    const next = local.ticks.next(now);
    this.#arm(local, next, next);
    return Promise.resolve();
  }

  /** Arms the timer of `local` for `at`, to send the tick of `plannedAt`. */
  #arm(local: Local, at: number | undefined, plannedAt: number | undefined): void {
    local.cancelTimer?.();
    local.cancelTimer = undefined;
    local.plannedAt = plannedAt;
    if (at === undefined || !this.#started || this.#local.get(local.name) !== local) return;
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, at - this.#options.clock.now()));
    local.cancelTimer = this.#options.clock.setTimer(delay, () => {
      local.cancelTimer = undefined;
      if (this.#options.clock.now() < at) this.#arm(local, at, plannedAt);
      else void this.#run(local);
    });
  }

  #run(local: Local): Promise<void> {
    const run = this.#tick(local).finally(() => {
      if (local.running === run) local.running = undefined;
    });
    local.running = run;
    return run;
  }

  /**
   * Sends the planned tick (or the latest due) unless the store says it was sent, then arms the
   * next: a tick that fired late by less than {@link MAX_LATE_MS} is sent in turn, so a busy moment
   * skips none.
   */
  async #tick(local: Local): Promise<void> {
    const { store, clock, logger } = this.#options;
    const now = clock.now();
    let after = now;
    let tickAt: number | undefined;
    try {
      const stored = await store.get(local.name);
      if (stored === undefined || specKeyOf(stored) !== local.specKey) {
        this.#adopt(local, stored);
        return;
      }
      const latest = local.ticks.latest(now);
      const planned = local.plannedAt;
      tickAt = latest;
      if (planned !== undefined && latest !== undefined && planned < latest) {
        tickAt = now - planned <= MAX_LATE_MS ? planned : local.catchUp === 'one' ? latest : undefined;
      }
      if (tickAt !== undefined) {
        after = Math.max(tickAt, stored.lastTickAt ?? tickAt);
        if (stored.lastTickAt === undefined || stored.lastTickAt < tickAt) {
          const messageId = await this.#send(local, tickAt);
          await store.recordTick(local.name, tickAt, local.ticks.next(tickAt), messageId);
        }
      }
    } catch (error) {
      // The bus stopped while this tick was sending: nothing to try again.
      if (!this.#started) return;
      logger.error(`Schedule "${local.name}" could not send its tick; trying again`, {
        schedule: local.name,
        error: error instanceof Error ? error.message : String(error),
      });
      const retryAt = clock.now() + RETRY_MS;
      const next = local.ticks.next(clock.now());
      if (next === undefined || retryAt < next) {
        this.#arm(local, retryAt, tickAt);
        return;
      }
    }
    const next = local.ticks.next(after);
    this.#arm(local, next, next);
  }

  /**
   * Sends the tick of `tickAt`, resolving to its message id; when the send fails (the broker is
   * down) and the bus still runs, records the failure as the schedule's `lastError` first.
   */
  async #send(local: Local, tickAt: number): Promise<string> {
    try {
      return await this.#options.send(local.definition, local.payload, {
        id: tickMessageId(local.name, tickAt),
        headers: {
          [SCHEDULE_HEADER]: local.name,
          [SCHEDULE_TICK_HEADER]: new Date(tickAt).toISOString(),
        },
      });
    } catch (error) {
      if (this.#started) {
        const message = error instanceof Error ? error.message : String(error);
        // The store may be down too: the failure is logged by the caller either way.
        await this.#options.store
          .recordTickFailure(local.name, tickAt, { message, at: this.#options.clock.now() })
          .catch(() => false);
      }
      throw error;
    }
  }

  /** Takes the stored version of a schedule changed elsewhere, or stops it here when it is gone. */
  #adopt(local: Local, stored: ScheduleRecord | undefined): void {
    if (
      stored === undefined ||
      stored.type !== local.definition.type ||
      stored.kind !== local.definition.kind
    ) {
      this.#drop(local.name);
      this.#options.logger.info(
        `Schedule "${local.name}" was cancelled or given another message type elsewhere; no longer run here`,
        {
          schedule: local.name,
        },
      );
      return;
    }
    try {
      const timing: ScheduleTiming =
        stored.cron !== undefined
          ? { cron: stored.cron, ...(stored.timeZone !== undefined ? { timeZone: stored.timeZone } : {}) }
          : { everyMs: stored.everyMs ?? 0 };
      local.ticks = scheduleTicks(local.name, timing);
      this.#options.check(local.definition, stored.payload);
    } catch (error) {
      this.#drop(local.name);
      this.#options.logger.error(
        `Schedule "${local.name}" was replaced elsewhere by one this process cannot run; no longer run here`,
        {
          schedule: local.name,
          error: error instanceof Error ? error.message : String(error),
        },
      );
      return;
    }
    local.payload = stored.payload;
    local.specKey = specKeyOf(stored);
    local.catchUp = stored.catchUp;
    void this.#activate(local, stored.lastTickAt);
  }

  #drop(name: string): boolean {
    const local = this.#local.get(name);
    if (local === undefined) return false;
    local.cancelTimer?.();
    local.cancelTimer = undefined;
    this.#local.delete(name);
    return true;
  }
}
