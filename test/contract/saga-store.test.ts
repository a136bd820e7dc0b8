import { InMemorySagaStore } from '../../src/sagas/in-memory-saga-store.js';
import { describeSagaStoreConformance } from '../../src/testing/saga-store-conformance.js';

describeSagaStoreConformance('InMemorySagaStore', ({ completedRetentionMs, clock }) =>
  Promise.resolve({
    store: new InMemorySagaStore(
      completedRetentionMs === undefined ? { clock } : { clock, completedRetentionMs },
    ),
  }),
);
