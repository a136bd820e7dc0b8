import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { suppressTracing } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type Span,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { expect, it } from 'vitest';
import { harrierTracing } from '../../../src/telemetry/index.js';

const outgoing = () =>
  ({
    id: randomUUID(),
    kind: 'command',
    type: 't.x',
    correlationId: 'c',
    traceparent: undefined,
    deferred: false,
  }) as const;

it('keeps tracing when its first hook runs inside a suppressTracing context', () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const exporter = new InMemorySpanExporter();
  const started: string[] = [];
  const spy: SpanProcessor = {
    onStart: (span: Span) => void started.push(span.name),
    onEnd: () => undefined,
    forceFlush: () => Promise.resolve(),
    shutdown: () => Promise.resolve(),
  };
  trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [spy, new SimpleSpanProcessor(exporter)] }),
  );
  const tracing = harrierTracing();
  // e.g. a send from code an instrumentation (or the app) runs with tracing suppressed
  context.with(suppressTracing(context.active()), () => tracing.traceparent(outgoing()));
  // later, ordinary sends in an ordinary context: still nothing traced
  const tp = tracing.traceparent(outgoing());
  expect(tp).toMatch(/^00-/);
  expect(exporter.getFinishedSpans()).toHaveLength(1);
});
