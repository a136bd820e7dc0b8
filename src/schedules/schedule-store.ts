import type { ScheduleRecord, ScheduleTickError } from './schedule-record.js';

/**
 * Where recurring schedules are kept, shared by every process of an application: what `every`
 * registered, and the last tick sent, so a restart knows what it missed.
 */
export interface ScheduleStore {
  /** The schedule of this name, or undefined. */
  get(name: string): Promise<ScheduleRecord | undefined>;
  /** Every schedule, by name. */
  list(): Promise<ScheduleRecord[]>;
  /** Stores a schedule, replacing the one of the same name. */
  put(record: ScheduleRecord): Promise<void>;
  /**
   * Records that the tick of `tickAt` was sent as the message `messageId` and the next is due at
   * `nextRunAt`, clearing `lastError`, unless the stored schedule already has a tick at or after
   * `tickAt` (another process was first) or is gone. Resolves to true when it recorded it.
   */
  recordTick(
    name: string,
    tickAt: number,
    nextRunAt: number | undefined,
    messageId?: string,
  ): Promise<boolean>;
  /**
   * Records that sending the tick of `tickAt` failed with `error` (kept as `lastError`), unless the
   * stored schedule already has a tick at or after `tickAt` (another process sent it) or is gone.
   * Resolves to true when it recorded it.
   */
  recordTickFailure(name: string, tickAt: number, error: ScheduleTickError): Promise<boolean>;
  /** Removes the schedule; resolves to true when there was one. */
  delete(name: string): Promise<boolean>;
  /** Releases what the store holds (connections). */
  close(): Promise<void>;
}
