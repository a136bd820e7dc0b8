import { InMemoryCheckpointStore } from '../../src/log/in-memory-checkpoint-store.js';
import { describeCheckpointStoreConformance } from '../../src/testing/checkpoint-store-conformance.js';

describeCheckpointStoreConformance('InMemoryCheckpointStore', async () => ({
  store: new InMemoryCheckpointStore(),
}));
