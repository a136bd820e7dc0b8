export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
export { settlesWithin, withDeadline } from './deadline.js';
export { ManualClock } from './manual-clock.js';
export { sleep } from './sleep.js';
export { WakeList } from './wake-list.js';
