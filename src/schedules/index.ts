export type { CatchUp, ScheduleRecord, ScheduleTickError, ScheduleTiming } from './schedule-record.js';
export type { ScheduleStore } from './schedule-store.js';
export { InMemoryScheduleStore } from './in-memory-schedule-store.js';
export {
  RecurringSchedules,
  SCHEDULE_HEADER,
  SCHEDULE_TICK_HEADER,
  tickMessageId,
} from './recurring-schedules.js';
export type { EveryOptions, RecurringSchedulesOptions } from './recurring-schedules.js';
export { scheduleTicks, MIN_EVERY_MS } from './schedule-ticks.js';
export type { ScheduleTicks } from './schedule-ticks.js';
