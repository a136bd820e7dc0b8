/**
 * `harrier/telemetry`: OpenTelemetry tracing and metrics for a bus. Needs `@opentelemetry/api` (an
 * optional peer); applications that do not import this entry point never load it.
 */
export {
  METER_NAME,
  PROCESS_DURATION_BUCKETS,
  harrierMetrics,
  type HarrierMetricsOptions,
} from './harrier-metrics.js';
export { combineTelemetry, harrierTelemetry, type HarrierTelemetryOptions } from './harrier-telemetry.js';
export { TRACER_NAME, harrierTracing, type HarrierTracingOptions } from './harrier-tracing.js';
export { formatTraceparent, parseTraceparent } from './traceparent.js';
