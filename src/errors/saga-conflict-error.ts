import { HarrierError } from './harrier-error.js';

/**
 * Thrown by `SagaStore.save` when the stored version of the instance is not the expected one.
 *
 * @remarks
 * Another step of the same instance saved first (or, on create, the instance already exists). The
 * write is not applied; read the instance again and re-run the step on the fresh state.
 */
export class SagaConflictError extends HarrierError {
  /** The saga name. */
  readonly saga: string;
  /** The saga id. */
  readonly sagaId: string;
  /** The version the caller expected (0: create). */
  readonly expectedVersion: number;
  /** The version stored when the save was refused; 0 when no instance is stored. */
  readonly actualVersion: number;

  constructor(saga: string, sagaId: string, expectedVersion: number, actualVersion: number) {
    const found = actualVersion === 0 ? 'no stored instance' : `stored version ${actualVersion}`;
    super(
      'saga-conflict',
      expectedVersion === 0
        ? `Saga "${saga}" instance "${sagaId}" already exists (${found}): load it and save with its version instead of creating it`
        : `Saga "${saga}" instance "${sagaId}" changed meanwhile: expected version ${expectedVersion}, found ${found}; load it again and re-run the step on the fresh state`,
    );
    this.saga = saga;
    this.sagaId = sagaId;
    this.expectedVersion = expectedVersion;
    this.actualVersion = actualVersion;
  }
}
