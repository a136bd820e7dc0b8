/**
 * `harrier/testing`: {@link createTestBus} for testing an application's handlers.
 *
 * @remarks
 * Loads without vitest, so it works under Jest, `node:test` or any other runner; under vitest, a
 * failing test also prints the seed of a shuffled test bus. The vitest conformance suites for a new
 * broker, log or store are in `harrier/testing/conformance`.
 *
 * @packageDocumentation
 */
export {
  createTestBus,
  type CapturedMessage,
  type TestBus,
  type TestBusOptions,
  type WhenIdleOptions,
} from './test-bus.js';
