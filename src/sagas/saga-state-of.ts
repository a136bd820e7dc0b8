import type { SagaInstance } from './saga-store.js';

/**
 * The saga's state of a stored instance, typed: `instance.state` as `S`.
 *
 * @remarks
 * The state is `instance.state` itself (the runtime keeps its redelivery bookkeeping in
 * `instance.applied`); this only saves a cast. It does not parse: use the saga's schema for that.
 *
 * @example
 * ```ts
 * const instance = await store.get('orders.Fulfilment', 'o-1');
 * const state = instance && sagaStateOf<FulfilmentState>(instance);
 * ```
 */
export function sagaStateOf<S = unknown>(instance: SagaInstance): S {
  return instance.state as S;
}
