import { tickMessageId } from './recurring-schedules.js';
import type { ScheduleRecord } from './schedule-record.js';

/**
 * The id of the message a schedule's last tick sent, or undefined before the first tick.
 *
 * @remarks
 * A record stored before stores kept the message id has the last tick alone; its id is derived from
 * the name and the tick's time, as every process derives it ({@link tickMessageId}).
 */
export function lastMessageIdOf(record: ScheduleRecord): string | undefined {
  if (record.lastMessageId !== undefined) return record.lastMessageId;
  return record.lastTickAt === undefined ? undefined : tickMessageId(record.name, record.lastTickAt);
}

/**
 * The outcome of a schedule's last tick as `harrier schedules` and the dashboard show it:
 * `send failed: <error> at <time>` when the send of a tick after the last one sent failed,
 * `sent <message id>` otherwise, or undefined before the first tick.
 */
export function scheduleOutcomeText(
  record: ScheduleRecord,
  formatTime: (ms: number) => string,
): string | undefined {
  if (record.lastError !== undefined) {
    return `send failed: ${record.lastError.message} at ${formatTime(record.lastError.at)}`;
  }
  const messageId = lastMessageIdOf(record);
  return messageId === undefined ? undefined : `sent ${messageId}`;
}
