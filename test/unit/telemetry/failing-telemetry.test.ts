import 'reflect-metadata';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  EventHandler,
  silentLogger,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import type { MessageTelemetry, ProcessObservation } from '../../../src/dispatch/message-telemetry.js';
import { harrierTracing } from '../../../src/telemetry/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { OrderPlaced, PlaceOrder } from '../bus/fixtures.js';

let placed = 0;
let seen = 0;

@CommandHandler(PlaceOrder)
class Place {
  handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
    placed++;
    ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
    return { accepted: true };
  }
}

@EventHandler(OrderPlaced)
class Seen {
  handle(): void {
    seen++;
  }
}

const fine: ProcessObservation = { within: (run) => run(), end: () => undefined };

function telemetry(overrides: Partial<MessageTelemetry>): MessageTelemetry {
  return { traceparent: () => undefined, process: () => fine, ...overrides };
}

function boom(): never {
  throw new Error('telemetry exploded');
}

describe('a telemetry integration that throws', () => {
  let bus: TestBus | undefined;
  afterEach(async () => {
    await bus?.stop();
    bus = undefined;
    placed = 0;
    seen = 0;
  });

  async function flow(given: MessageTelemetry): Promise<void> {
    bus = await createTestBus({
      endpoint: 'shop',
      handlers: [Place, Seen],
      telemetry: given,
      logger: silentLogger,
      deliveryOrder: 'fifo',
    });
    await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
    await bus.whenIdle({ timeoutMs: 5_000 });
  }

  const cases: [string, MessageTelemetry][] = [
    ['in process()', telemetry({ process: boom })],
    [
      'in end(), after the handler committed',
      telemetry({ process: () => ({ within: (run) => run(), end: boom }) }),
    ],
    [
      'in within(), before running the call',
      telemetry({ process: () => ({ within: boom, end: () => undefined }) }),
    ],
    [
      'in within(), after the call ran',
      telemetry({
        process: () => ({
          within: async (run) => {
            await run();
            boom();
          },
          end: () => undefined,
        }),
      }),
    ],
    [
      'nowhere, but within() never runs the call',
      telemetry({
        process: () => ({ within: () => Promise.resolve(undefined as never), end: () => undefined }),
      }),
    ],
    ['in publish(), before the commit', telemetry({ publish: boom })],
    [
      'in publish(), after the commit',
      telemetry({
        publish: async (_messages, _origin, run) => {
          await run();
          boom();
        },
      }),
    ],
    ['in observe()', telemetry({ observe: boom })],
    ['in the function observe() returned', telemetry({ observe: () => boom })],
  ];

  for (const [where, given] of cases) {
    it(`handles each message once and settles it when it throws ${where}`, async () => {
      await flow(given);
      expect(placed).toBe(1);
      expect(seen).toBe(1);
      expect(await bus!.deadLetters.count()).toBe(0);
      await bus!.stop();
    });
  }

  it('still ends execute() with the handler result when end() throws', async () => {
    bus = await createTestBus({
      handlers: [Place, Seen],
      telemetry: telemetry({ process: () => ({ within: (run) => run(), end: boom }) }),
      logger: silentLogger,
    });
    await expect(bus.execute(PlaceOrder, { orderId: 'o-2', amount: 1 })).resolves.toEqual({ accepted: true });
  });
});

@CommandHandler(PlaceOrder, { retry: { attempts: 2, backoff: { baseMs: 10, jitter: 0 } } })
class ThrowsBareObject {
  handle(): void {
    placed++;
    // A library may reject with a null-prototype record: String() of it throws.
    throw Object.create(null) as Error;
  }
}

describe('harrierTracing and a handler that throws an object String() cannot convert', () => {
  it('retries, then dead-letters the message, as without telemetry', async () => {
    placed = 0;
    const tracerProvider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(new InMemorySpanExporter())],
    });
    const bus = await createTestBus({
      handlers: [ThrowsBareObject],
      telemetry: harrierTracing({ tracerProvider }),
      logger: silentLogger,
    });
    try {
      await bus.send(PlaceOrder, { orderId: 'o-3', amount: 1 });
      await bus.whenIdle({ timeoutMs: 5_000 });
      expect(placed).toBe(2);
      expect(await bus.deadLetters.count()).toBe(1);
    } finally {
      await bus.stop();
    }
  });
});
