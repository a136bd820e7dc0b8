import { z } from 'zod';
import {
  Saga,
  StartedBy,
  defineEvent,
  upcasters,
  type PayloadOf,
  type SagaContext,
  type SagaInstance,
  type SagaStore,
} from '../../src/index.js';
import { createTestBus } from '../../src/testing/index.js';

/** An item added to an order: the one message of every version of the order saga. */
export const ItemAdded = defineEvent('sagaver.ItemAdded', {
  schema: z.object({ orderId: z.string(), amount: z.number() }),
});

/** Version 1 of the state: the total as a bare number. */
export const StateV1 = z.object({ total: z.number().default(0) });
export type StateV1 = z.output<typeof StateV1>;

/** Version 2 of the state: the total with its currency, and a count of items. */
export const StateV2 = z.object({
  total: z.object({ amount: z.number(), currency: z.string() }).default({ amount: 0, currency: 'EUR' }),
  items: z.number().default(0),
});
export type StateV2 = z.output<typeof StateV2>;

/** The order saga as first written: state version 1. */
@Saga('sagaver.Order', { state: StateV1 })
export class OrderSagaV1 {
  @StartedBy(ItemAdded, { correlate: 'orderId' })
  add(payload: PayloadOf<typeof ItemAdded>, ctx: SagaContext<StateV1>): void {
    ctx.state.total += payload.amount;
  }
}

/** The order saga after its state changed shape: version 2, raising a version-1 state on load. */
@Saga('sagaver.Order', {
  state: StateV2,
  version: 2,
  // Items were not counted in version 1: a stored total counts as one.
  upcast: upcasters<StateV1>().step((v1) => ({
    total: { amount: v1.total, currency: 'EUR' },
    items: v1.total > 0 ? 1 : 0,
  })),
})
export class OrderSagaV2 {
  @StartedBy(ItemAdded, { correlate: 'orderId' })
  add(payload: PayloadOf<typeof ItemAdded>, ctx: SagaContext<StateV2>): void {
    ctx.state.total.amount += payload.amount;
    ctx.state.items += 1;
  }
}

/** What {@link runVersion1ThenVersion2} saw. */
export interface VersionRun {
  /** The instance after version 1 of the saga handled its message. */
  readonly afterV1: SagaInstance | undefined;
  /** The instance after version 2 handled its message. */
  readonly afterV2: SagaInstance | undefined;
  /** The messages dead-lettered by either. */
  readonly deadLetters: number;
}

/**
 * Runs version 1 of the order saga on `store` for `orderId` (an item of 5), stops it, then version 2
 * on the same store (an item of 3), each on a test bus of its own; the store stays open.
 */
export async function runVersion1ThenVersion2(store: SagaStore, orderId: string): Promise<VersionRun> {
  const v1 = await createTestBus({ sagas: [OrderSagaV1], sagaStore: store });
  await v1.publish(ItemAdded, { orderId, amount: 5 });
  await v1.whenIdle();
  const afterV1 = await store.get('sagaver.Order', orderId);
  let deadLetters = await v1.deadLetters.count();
  await v1.stop({ closeBroker: false });
  const v2 = await createTestBus({ sagas: [OrderSagaV2], sagaStore: store });
  await v2.publish(ItemAdded, { orderId, amount: 3 });
  await v2.whenIdle();
  const afterV2 = await store.get('sagaver.Order', orderId);
  deadLetters += await v2.deadLetters.count();
  await v2.stop({ closeBroker: false });
  return { afterV1, afterV2, deadLetters };
}

/** What {@link runVersion1ThenVersion2} leaves in the store: asserted on every store. */
export const RAISED = {
  afterV1: { state: { total: 5 }, stateVersion: 1, version: 1 },
  afterV2: { state: { total: { amount: 8, currency: 'EUR' }, items: 2 }, stateVersion: 2, version: 2 },
} as const;
