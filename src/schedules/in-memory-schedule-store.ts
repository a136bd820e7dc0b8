import type { ScheduleRecord, ScheduleTickError } from './schedule-record.js';
import type { ScheduleStore } from './schedule-store.js';

/**
 * A {@link ScheduleStore} in this process's memory: for tests and one-process applications (a
 * restart forgets every schedule, so nothing is caught up).
 */
export class InMemoryScheduleStore implements ScheduleStore {
  readonly #records = new Map<string, ScheduleRecord>();

  get(name: string): Promise<ScheduleRecord | undefined> {
    return Promise.resolve(this.#records.get(name));
  }

  list(): Promise<ScheduleRecord[]> {
    return Promise.resolve(
      [...this.#records.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    );
  }

  put(record: ScheduleRecord): Promise<void> {
    this.#records.set(record.name, { ...record });
    return Promise.resolve();
  }

  recordTick(
    name: string,
    tickAt: number,
    nextRunAt: number | undefined,
    messageId?: string,
  ): Promise<boolean> {
    const record = this.#pending(name, tickAt);
    if (record === undefined) return Promise.resolve(false);
    this.#records.set(name, {
      ...record,
      lastTickAt: tickAt,
      nextRunAt,
      lastMessageId: messageId,
      lastError: undefined,
    });
    return Promise.resolve(true);
  }

  recordTickFailure(name: string, tickAt: number, error: ScheduleTickError): Promise<boolean> {
    const record = this.#pending(name, tickAt);
    if (record === undefined) return Promise.resolve(false);
    this.#records.set(name, { ...record, lastError: { message: error.message, at: error.at } });
    return Promise.resolve(true);
  }

  delete(name: string): Promise<boolean> {
    return Promise.resolve(this.#records.delete(name));
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  /** The record of `name` when it has no tick at or after `tickAt` yet. */
  #pending(name: string, tickAt: number): ScheduleRecord | undefined {
    const record = this.#records.get(name);
    if (record === undefined || (record.lastTickAt !== undefined && record.lastTickAt >= tickAt)) {
      return undefined;
    }
    return record;
  }
}
