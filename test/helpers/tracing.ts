/**
 * An OpenTelemetry SDK for a test file: an in-memory exporter behind a simple span processor, and
 * the AsyncLocalStorage context manager enabled for the file's tests.
 */
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';

/** The file's tracer provider and what it finished. */
export interface InMemoryTracing {
  readonly tracerProvider: BasicTracerProvider;
  readonly exporter: InMemorySpanExporter;
  /** Finished spans, those named `name` when given. */
  readonly spans: (name?: string) => ReadableSpan[];
  /** The one finished span named `name` (fails the test unless there is exactly one). */
  readonly only: (name: string) => ReadableSpan;
}

/** Sets up tracing for the calling test file; spans are cleared after each test. */
export function useInMemoryTracing(): InMemoryTracing {
  const contextManager = new AsyncLocalStorageContextManager();
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  beforeAll(() => {
    context.setGlobalContextManager(contextManager.enable());
  });
  afterEach(() => {
    exporter.reset();
  });
  afterAll(async () => {
    context.disable();
    await tracerProvider.shutdown();
  });
  const spans = (name?: string): ReadableSpan[] =>
    exporter.getFinishedSpans().filter((s) => name === undefined || s.name === name);
  return {
    tracerProvider,
    exporter,
    spans,
    only: (name) => {
      const named = spans(name);
      expect(named, `spans named "${name}"`).toHaveLength(1);
      return named[0]!;
    },
  };
}

/** The span ids of a span's links, in order. */
export function linkedSpanIds(span: ReadableSpan): string[] {
  return span.links.map((link) => link.context.spanId);
}
