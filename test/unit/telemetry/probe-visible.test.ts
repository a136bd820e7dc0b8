import { randomUUID } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, type Span, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { expect, it } from 'vitest';
import { harrierTracing } from '../../../src/telemetry/index.js';

it('hands the span processors no probe span when it checks for an SDK', () => {
  const started: string[] = [];
  const ended: string[] = [];
  const spy: SpanProcessor = {
    onStart: (span: Span) => void started.push(span.name),
    onEnd: (span) => void ended.push(span.name),
    forceFlush: () => Promise.resolve(),
    shutdown: () => Promise.resolve(),
  };
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [spy] }));
  harrierTracing().traceparent({
    id: randomUUID(),
    kind: 'event',
    type: 't.e',
    correlationId: 'c',
    traceparent: undefined,
    deferred: false,
  });
  expect(
    started.filter((n) => n === 'harrier.probe'),
    'probe started',
  ).toEqual([]);
});
