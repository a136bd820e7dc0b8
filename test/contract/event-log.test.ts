import { InMemoryEventLog } from '../../src/log/in-memory-event-log.js';
import { describeEventLogConformance } from '../../src/testing/event-log-conformance.js';

describeEventLogConformance('InMemoryEventLog', async (topics) => ({
  log: new InMemoryEventLog({ topics }),
}));
