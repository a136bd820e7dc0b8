import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { expect, it } from 'vitest';
import type { MessageTelemetry } from '../../../src/index.js';
import { combineTelemetry, harrierTracing } from '../../../src/telemetry/index.js';
import { processInfo } from './fixtures.js';

const info = processInfo();

function traced() {
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, tracing: harrierTracing({ tracerProvider }) };
}

it("keeps observing with the other parts when a later part's process() throws, so the span still ends", () => {
  const { exporter, tracing } = traced();
  const broken: MessageTelemetry = {
    traceparent: () => undefined,
    process: () => {
      throw new Error('boom');
    },
  };
  const observation = combineTelemetry([tracing, broken]).process(info);
  expect(observation).toBeDefined();
  observation?.end({ kind: 'handled' });
  expect(exporter.getFinishedSpans()).toHaveLength(1);
});

it("ends the tracing span when a later part's end() throws", () => {
  const { exporter, tracing } = traced();
  const broken: MessageTelemetry = {
    traceparent: () => undefined,
    process: () => ({
      within: (run) => run(),
      end: () => {
        throw new Error('boom');
      },
    }),
  };
  const observation = combineTelemetry([tracing, broken]).process(info);
  try {
    observation?.end({ kind: 'handled' });
  } catch {
    /* the pipeline's guard logs it */
  }
  expect(exporter.getFinishedSpans()).toHaveLength(1);
});

it('stops the registrations of the other parts when one observe() throws', () => {
  let registered = 0;
  const good: MessageTelemetry = {
    traceparent: () => undefined,
    process: () => undefined,
    observe: () => {
      registered++;
      return () => {
        registered--;
      };
    },
  };
  const bad: MessageTelemetry = {
    traceparent: () => undefined,
    process: () => undefined,
    observe: () => {
      throw new Error('boom');
    },
  };
  let stop: (() => void) | undefined;
  try {
    stop = combineTelemetry([good, bad]).observe?.({ endpoint: 'e' });
  } catch {
    /* bus logs it */
  }
  stop?.();
  expect(registered).toBe(0);
});
