export {
  DEFAULT_COMPLETED_RETENTION_MS,
  DEFAULT_SAGA_PAGE_LIMIT,
  compareSagaPositions,
  completedRetentionOf,
  decodeSagaCursor,
  encodeSagaCursor,
  sagaPageLimit,
  serializeSagaWrite,
} from './saga-store.js';
export type {
  SagaCursorPosition,
  SagaInstance,
  SagaListFilter,
  SagaPage,
  SagaPageOptions,
  SagaStatus,
  SagaStore,
  SagaTimeoutRecord,
  SagaWrite,
} from './saga-store.js';
export { InMemorySagaStore } from './in-memory-saga-store.js';
export type { InMemorySagaStoreOptions } from './in-memory-saga-store.js';
