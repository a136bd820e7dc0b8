export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
export { ManualClock } from './manual-clock.js';
export { sleep } from './sleep.js';
export { WakeList } from './wake-list.js';
