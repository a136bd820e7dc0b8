import 'reflect-metadata';
import { expect, it } from 'vitest';
import { InMemoryBroker, createBus, silentLogger, type MessageTelemetry } from '../../../src/index.js';
import { PlaceOrderHandler } from './fixtures.js';

it('stops observing when bus.stop() is called while bus.start() awaits the broker', async () => {
  const broker = new InMemoryBroker();
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const register = broker.register.bind(broker);
  broker.register = async (endpoint, specs) => {
    await gate;
    return register(endpoint, specs);
  };
  let observing = 0;
  const telemetry: MessageTelemetry = {
    traceparent: () => undefined,
    process: () => undefined,
    observe: () => {
      observing++;
      return () => {
        observing--;
      };
    },
  };
  const bus = createBus({
    endpoint: 'shop',
    broker,
    handlers: [PlaceOrderHandler],
    logger: silentLogger,
    telemetry,
  });
  const starting = bus.start().catch(() => undefined);
  await new Promise((r) => setImmediate(r));
  const stopping = bus.stop({ closeBroker: false });
  release();
  await Promise.all([starting, stopping]);
  expect(observing, 'gauge callbacks still registered after stop').toBe(0);
});
