import type { OutgoingMessage } from '../broker/message-broker.js';
import type { SagaInstance } from './saga-store.js';

/** How many handled message ids (with what their steps published) an instance remembers. */
export const SAGA_APPLIED_KEPT = 64;

/** A step already saved: the message it handled and the messages it recorded. */
export interface AppliedSagaStep {
  readonly message: string;
  readonly outgoing: readonly OutgoingMessage[];
}

/**
 * What the saga runtime keeps as a stored instance's `state`: the saga's own state (`data`) and the
 * last steps it applied.
 *
 * @remarks
 * The applied steps let a redelivery of a message whose step was saved but whose messages were not
 * all published (a crash, a broker failure) publish the same messages again instead of running the
 * step twice on the state it already changed. Only the last {@link SAGA_APPLIED_KEPT} are kept.
 */
export interface StoredSagaState {
  readonly data: unknown;
  readonly applied: readonly AppliedSagaStep[];
}

/** The runtime's view of a stored instance's state (tolerates any shape). */
export function readStoredSagaState(instance: SagaInstance): StoredSagaState {
  const stored = instance.state as Partial<StoredSagaState> | null;
  return { data: stored?.data, applied: Array.isArray(stored?.applied) ? stored.applied : [] };
}

/**
 * The saga's own state of a stored instance, as its steps see it: what `SagaStore.get` returns
 * holds it beside the runtime's bookkeeping.
 *
 * @example
 * ```ts
 * const instance = await store.get('orders.Fulfilment', 'o-1');
 * const state = instance && sagaStateOf<FulfilmentState>(instance);
 * ```
 */
export function sagaStateOf<S = unknown>(instance: SagaInstance): S {
  return readStoredSagaState(instance).data as S;
}
