import { metrics, trace } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { expect, it } from 'vitest';
import { harrierMetrics, harrierTracing } from '../../../src/telemetry/index.js';
import { processInfo } from './fixtures.js';

class Reader extends MetricReader {
  protected override onShutdown() {
    return Promise.resolve();
  }
  protected override onForceFlush() {
    return Promise.resolve();
  }
}
const info = processInfo();

it('starts measuring once an SDK registers, even after a send before it (as tracing does)', async () => {
  const m = harrierMetrics();
  const t = harrierTracing();
  // bus.send / publish before start goes through the publish hook
  await m.publish?.([], undefined, () => Promise.resolve());
  await t.publish?.([], undefined, () => Promise.resolve());
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [new Reader()] }));
  trace.setGlobalTracerProvider(new BasicTracerProvider());
  expect(t.process(info), 'tracing sees the late SDK').toBeDefined();
  expect(m.process(info), 'metrics sees the late SDK').toBeDefined();
});
