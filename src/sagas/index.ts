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
  SagaAppliedStep,
  SagaCursorPosition,
  SagaInstance,
  SagaListFilter,
  SagaPage,
  SagaSummary,
  SagaPageOptions,
  SagaStatus,
  SagaStore,
  SagaStoreCall,
  SagaTimeoutRecord,
  SagaWrite,
  SerializedSagaWrite,
} from './saga-store.js';
export { InMemorySagaStore } from './in-memory-saga-store.js';
export type { InMemorySagaStoreOptions } from './in-memory-saga-store.js';
export { Handles, Saga, StartedBy } from './saga-decorators.js';
export type { HandlesOptions, SagaStepDescriptor, StartedByOptions } from './saga-decorators.js';
export {
  SAGA_APPLIED_KEPT,
  SAGA_APPLIED_MAX_BYTES,
  SAGA_APPLIED_RETENTION_MS,
  SAGA_CONFLICT_TRIES,
} from './saga-metadata.js';
export type { SagaCorrelation, SagaMissingRule, SagaOptions } from './saga-metadata.js';
export type { SagaContext } from './saga-context.js';
export { createSagaStepRunner } from './saga-step-runner.js';
export type { SagaStepRunnerOptions } from './saga-step-runner.js';
export { sagaStateOf } from './saga-state-of.js';
