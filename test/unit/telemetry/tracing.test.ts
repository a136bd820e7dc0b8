import 'reflect-metadata';
import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CommandHandler, EventHandler, type MessageContext, type PayloadOf } from '../../../src/index.js';
import {
  harrierTracing,
  parseTraceparent,
  type HarrierTracingOptions,
} from '../../../src/telemetry/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { OrderPlaced, PlaceOrder } from '../bus/fixtures.js';

const contextManager = new AsyncLocalStorageContextManager();
const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
});
afterAll(async () => {
  context.disable();
  await tracerProvider.shutdown();
});

@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
    ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
    return { accepted: true };
  }
}

class FlakyError extends Error {
  override name = 'FlakyError';
}
class BrokenError extends Error {
  override name = 'BrokenError';
}

@EventHandler(OrderPlaced, { retry: { attempts: 3 } })
class Flaky {
  handle(_payload: unknown, ctx: MessageContext): void {
    if (ctx.attempt === 1) throw new FlakyError('first attempt fails');
  }
}

@EventHandler(OrderPlaced, { retry: { attempts: 2 } })
class Broken {
  handle(): void {
    throw new BrokenError('always fails');
  }
}

@EventHandler(OrderPlaced)
class Audit {
  handle(): void {}
}

const KEY = 'a3f1c2d4e5b60718293a4b5c6d7e8f90112233445566778899aabbccddeeff00';

function spansNamed(name: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((s) => s.name === name);
}

function processSpans(handler: string): ReadableSpan[] {
  return spansNamed('process test.OrderPlaced')
    .filter((s) => s.attributes['harrier.handler'] === handler)
    .sort((a, b) => Number(a.attributes['harrier.attempt']) - Number(b.attributes['harrier.attempt']));
}

function only(spans: readonly ReadableSpan[]): ReadableSpan {
  expect(spans).toHaveLength(1);
  return spans[0]!;
}

describe('harrierTracing', () => {
  let bus: TestBus | undefined;
  afterEach(async () => {
    await bus?.stop();
    bus = undefined;
    exporter.reset();
  });

  async function run(options: HarrierTracingOptions): Promise<string> {
    bus = await createTestBus({
      endpoint: 'shop',
      handlers: [PlaceOrderHandler, Flaky, Broken],
      telemetry: harrierTracing({ tracerProvider, ...options }),
    });
    const id = await bus.send(
      PlaceOrder,
      { orderId: 'o-1', amount: 2 },
      { correlationId: '0190a0b0-0000-7000-8000-000000000001' },
    );
    await bus.whenIdle();
    return id;
  }

  describe("with relation: 'parent'", () => {
    it('puts send, command handler, published event and both event handlers in one trace', async () => {
      await run({ relation: 'parent' });
      const spans = exporter.getFinishedSpans();
      expect(spans.length).toBe(8);
      const traceIds = new Set(spans.map((s) => s.spanContext().traceId));
      expect(traceIds.size).toBe(1);
    });

    it('makes one PRODUCER span per outgoing message, carried as its traceparent', async () => {
      const commandId = await run({ relation: 'parent' });
      const send = only(spansNamed('send test.PlaceOrder'));
      const publish = only(spansNamed('create test.OrderPlaced'));
      expect(send.kind).toBe(SpanKind.PRODUCER);
      expect(publish.kind).toBe(SpanKind.PRODUCER);
      expect(send.attributes).toMatchObject({
        'messaging.system': 'harrier',
        'messaging.destination.name': 'test.PlaceOrder',
        'messaging.operation.name': 'send',
        'messaging.operation.type': 'send',
        'messaging.message.id': commandId,
        'messaging.message.conversation_id': '0190a0b0-0000-7000-8000-000000000001',
      });
      expect(publish.attributes).toMatchObject({
        'messaging.operation.name': 'create',
        'messaging.operation.type': 'create',
      });
      const [command] = bus!.messagesOf(PlaceOrder);
      const [event] = bus!.messagesOf(OrderPlaced);
      expect(parseTraceparent(command?.envelope.meta.traceparent)?.spanId).toBe(send.spanContext().spanId);
      expect(parseTraceparent(event?.envelope.meta.traceparent)?.spanId).toBe(publish.spanContext().spanId);
      // The event was published while the command handler's span was active.
      const handled = only(spansNamed('process test.PlaceOrder'));
      expect(publish.parentSpanContext?.spanId).toBe(handled.spanContext().spanId);
    });

    it('makes one CONSUMER span per attempt, linked to and child of its producer', async () => {
      await run({ relation: 'parent' });
      const send = only(spansNamed('send test.PlaceOrder'));
      const publish = only(spansNamed('create test.OrderPlaced'));
      const handled = only(spansNamed('process test.PlaceOrder'));
      const flaky = processSpans('Flaky');
      const broken = processSpans('Broken');
      expect(flaky).toHaveLength(2);
      expect(broken).toHaveLength(2);
      expect(handled.parentSpanContext?.spanId).toBe(send.spanContext().spanId);
      expect(handled.links.map((l) => l.context.spanId)).toEqual([send.spanContext().spanId]);
      for (const span of [...flaky, ...broken]) {
        expect(span.kind).toBe(SpanKind.CONSUMER);
        expect(span.parentSpanContext?.spanId).toBe(publish.spanContext().spanId);
        expect(span.links.map((l) => l.context.spanId)).toEqual([publish.spanContext().spanId]);
      }
      expect(handled.attributes).toMatchObject({
        'messaging.system': 'harrier',
        'messaging.destination.name': 'test.PlaceOrder',
        'messaging.operation.name': 'process',
        'messaging.operation.type': 'process',
        'messaging.message.id': bus!.messagesOf(PlaceOrder)[0]?.envelope.id,
        'messaging.message.conversation_id': '0190a0b0-0000-7000-8000-000000000001',
        'messaging.consumer.group.name': 'shop',
        'harrier.handler': 'PlaceOrderHandler',
        'harrier.attempt': 1,
      });
    });

    it('marks failed attempts with error.type and an error status', async () => {
      await run({ relation: 'parent' });
      const [flakyFirst, flakySecond] = processSpans('Flaky');
      expect(flakyFirst?.attributes['harrier.attempt']).toBe(1);
      expect(flakyFirst?.attributes['error.type']).toBe('FlakyError');
      expect(flakyFirst?.status.code).toBe(SpanStatusCode.ERROR);
      expect(flakyFirst?.events.map((e) => e.name)).toEqual(['exception', 'harrier.retry_scheduled']);
      expect(flakySecond?.attributes['harrier.attempt']).toBe(2);
      expect(flakySecond?.attributes['error.type']).toBeUndefined();
      expect(flakySecond?.status.code).not.toBe(SpanStatusCode.ERROR);
      for (const span of processSpans('Broken')) {
        expect(span.attributes['error.type']).toBe('BrokenError');
        expect(span.status.code).toBe(SpanStatusCode.ERROR);
      }
      expect(await bus!.deadLetters.count()).toBe(1);
    });
  });

  describe("with relation: 'link' (the default)", () => {
    it('starts each CONSUMER span in a new trace, linked to its producer', async () => {
      await run({});
      const send = only(spansNamed('send test.PlaceOrder'));
      const publish = only(spansNamed('create test.OrderPlaced'));
      const handled = only(spansNamed('process test.PlaceOrder'));
      expect(handled.parentSpanContext).toBeUndefined();
      expect(handled.spanContext().traceId).not.toBe(send.spanContext().traceId);
      expect(handled.links[0]?.context).toMatchObject({
        traceId: send.spanContext().traceId,
        spanId: send.spanContext().spanId,
      });
      expect(publish.spanContext().traceId).toBe(handled.spanContext().traceId);
      for (const span of [...processSpans('Flaky'), ...processSpans('Broken')]) {
        expect(span.parentSpanContext).toBeUndefined();
        expect(span.links[0]?.context.spanId).toBe(publish.spanContext().spanId);
      }
    });
  });

  describe('with signing', () => {
    it('signs the envelope with the producer span traceparent, so every delivery verifies', async () => {
      bus = await createTestBus({
        handlers: [PlaceOrderHandler, Audit],
        signing: { keys: [KEY] },
        telemetry: harrierTracing({ tracerProvider, relation: 'parent' }),
      });
      await bus.send(PlaceOrder, { orderId: 'o-3', amount: 1 });
      await bus.whenIdle();
      expect(await bus.deadLetters.count()).toBe(0);
      const publish = only(spansNamed('create test.OrderPlaced'));
      const [event] = bus.messagesOf(OrderPlaced);
      expect(parseTraceparent(event?.envelope.meta.traceparent)?.spanId).toBe(publish.spanContext().spanId);
      expect(only(spansNamed('process test.OrderPlaced')).status.code).not.toBe(SpanStatusCode.ERROR);
    });
  });

  describe('without an SDK (the global provider is a no-op)', () => {
    it("keeps the traceparent messages carried before: the sender's option, then the cause's", async () => {
      bus = await createTestBus({ handlers: [PlaceOrderHandler, Audit], telemetry: harrierTracing() });
      const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
      await bus.send(PlaceOrder, { orderId: 'o-4', amount: 1 }, { traceparent });
      await bus.whenIdle();
      expect(bus.messagesOf(PlaceOrder)[0]?.envelope.meta.traceparent).toBe(traceparent);
      expect(bus.messagesOf(OrderPlaced)[0]?.envelope.meta.traceparent).toBe(traceparent);
      expect(exporter.getFinishedSpans()).toHaveLength(0);
    });
  });

  describe('when the sender has an active span', () => {
    it('makes the PRODUCER span its child', async () => {
      bus = await createTestBus({
        handlers: [PlaceOrderHandler],
        telemetry: harrierTracing({ tracerProvider }),
      });
      const tracer = tracerProvider.getTracer('app');
      await tracer.startActiveSpan('request', async (request) => {
        await bus!.send(PlaceOrder, { orderId: 'o-2', amount: 1 });
        request.end();
      });
      const send = only(spansNamed('send test.PlaceOrder'));
      const request = only(spansNamed('request'));
      expect(send.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
      expect(trace.getActiveSpan()).toBeUndefined();
    });
  });
});

describe('parseTraceparent', () => {
  it('reads a version 00 traceparent as a remote span context', () => {
    expect(parseTraceparent('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')).toEqual({
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: 'b7ad6b7169203331',
      traceFlags: 1,
      isRemote: true,
    });
  });

  it('refuses malformed, all-zero and version ff values', () => {
    expect(parseTraceparent(undefined)).toBeUndefined();
    expect(parseTraceparent('nonsense')).toBeUndefined();
    expect(parseTraceparent('00-00000000000000000000000000000000-b7ad6b7169203331-01')).toBeUndefined();
    expect(parseTraceparent('ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')).toBeUndefined();
    expect(parseTraceparent('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra')).toBeUndefined();
  });
});
