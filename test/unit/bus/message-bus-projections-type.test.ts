import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  InMemoryEventLog,
  createBus,
  silentLogger,
  type BusOptions,
  type MessageBus,
  type MessageBusWithProjections,
} from '../../../src/index.js';
import { ProjectionRunner } from '../../../src/projections/projection-runner.js';

// The type assertions are checked by `tsc -p tsconfig.json --noEmit` (npm run typecheck); the
// runtime ones check that the types tell the truth.
describe('createBus', () => {
  describe('when its options name an event log', () => {
    it('returns a bus whose projections are typed as always there', () => {
      const bus = createBus({
        eventLog: new InMemoryEventLog({ topics: [{ name: 'orders', partitions: 1 }] }),
        logger: silentLogger,
      });
      expectTypeOf(bus).toEqualTypeOf<MessageBusWithProjections>();
      expectTypeOf(bus.projections).toEqualTypeOf<ProjectionRunner>();
      expectTypeOf(bus).toExtend<MessageBus>();
      expect(bus.projections).toBeInstanceOf(ProjectionRunner);
    });
  });

  describe('when its options name no event log', () => {
    it('returns a bus whose projections may be undefined', () => {
      const bus = createBus({ endpoint: 'orders', logger: silentLogger });
      expectTypeOf(bus).toEqualTypeOf<MessageBus>();
      expectTypeOf(bus.projections).toEqualTypeOf<ProjectionRunner | undefined>();
      // @ts-expect-error without an event log there may be no runner
      expect(() => bus.projections.status()).toThrow(TypeError);
      expect(bus.projections).toBeUndefined();
    });
  });

  describe('when its options are only known as BusOptions', () => {
    it('returns a MessageBus, as before', () => {
      const options: BusOptions = { logger: silentLogger };
      expectTypeOf(createBus(options)).toEqualTypeOf<MessageBus>();
      expectTypeOf(createBus()).toEqualTypeOf<MessageBus>();
      expectTypeOf(createBus).parameter(0).toExtend<BusOptions | undefined>();
    });
  });
});
