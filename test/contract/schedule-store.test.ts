import { InMemoryScheduleStore } from '../../src/schedules/in-memory-schedule-store.js';
import { describeScheduleStoreConformance } from '../../src/testing/schedule-store-conformance.js';

describeScheduleStoreConformance('InMemoryScheduleStore', () =>
  Promise.resolve({ store: new InMemoryScheduleStore() }),
);
