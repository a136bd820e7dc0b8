/**
 * `harrier/telemetry`: OpenTelemetry tracing for a bus. Needs `@opentelemetry/api` (an optional
 * peer); applications that do not import this entry point never load it.
 */
export { TRACER_NAME, harrierTracing, type HarrierTracingOptions } from './harrier-tracing.js';
export { formatTraceparent, parseTraceparent } from './traceparent.js';
