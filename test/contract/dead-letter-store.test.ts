import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { describeDeadLetterStoreConformance } from '../../src/testing/dead-letter-store-conformance.js';

describeDeadLetterStoreConformance('InMemoryDeadLetterStore', async () => ({
  store: new InMemoryDeadLetterStore(),
}));
