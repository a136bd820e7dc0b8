import 'reflect-metadata';
import { trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { harrierTelemetry, harrierTracing } from '../../../src/telemetry/index.js';
import { processInfo } from './fixtures.js';
import { PlaceOrder } from '../bus/fixtures.js';

const info = processInfo();
const id = info.envelope.id;
const outgoing = {
  id,
  kind: 'command',
  type: PlaceOrder.type,
  correlationId: id,
  traceparent: undefined,
  deferred: false,
} as const;

// One file, one global provider: the order of these tests is the order of an application's start-up.
describe('harrierTracing with the global provider', () => {
  it('observes nothing and makes no traceparent while no SDK is registered', () => {
    const tracing = harrierTracing();
    expect(tracing.process(info)).toBeUndefined();
    expect(tracing.traceparent(outgoing)).toBeUndefined();
    expect(harrierTelemetry().process(info)).toBeUndefined();
  });

  it('starts tracing once an SDK registers a provider, without a new bus', () => {
    const tracing = harrierTracing();
    expect(tracing.process(info)).toBeUndefined();
    const exporter = new InMemorySpanExporter();
    trace.setGlobalTracerProvider(
      new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    );
    const observation = tracing.process(info);
    expect(observation).toBeDefined();
    observation?.end({ kind: 'handled' });
    expect(tracing.traceparent(outgoing)).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual([
      `process ${PlaceOrder.type}`,
      `send ${PlaceOrder.type}`,
    ]);
  });
});
