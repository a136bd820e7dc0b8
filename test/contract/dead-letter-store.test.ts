import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { describeDeadLetterStoreConformance } from '../../src/testing/dead-letter-store-conformance.js';
import { withoutMarkReplayHandled } from '../helpers/without-mark-replay-handled.js';

describeDeadLetterStoreConformance('InMemoryDeadLetterStore', async () => ({
  store: new InMemoryDeadLetterStore(),
}));

// The optional methods' tests skip, and everything else still holds, for a store written before them.
describeDeadLetterStoreConformance('a store without the optional methods', async () => ({
  store: withoutMarkReplayHandled(new InMemoryDeadLetterStore()),
}));
