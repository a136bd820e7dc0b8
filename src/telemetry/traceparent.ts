import { TraceFlags, trace, type SpanContext } from '@opentelemetry/api';

const VERSION_00 = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$/;

/**
 * Reads a W3C traceparent (`00-<trace id>-<span id>-<flags>`) as a remote span context.
 *
 * @returns `undefined` for a missing, malformed or all-zero value, or the forbidden version `ff`.
 */
export function parseTraceparent(value: string | undefined): SpanContext | undefined {
  if (value === undefined) return undefined;
  // The common case, a version 00 value as Harrier writes it, without the regular expression's
  // captures (every delivery parses one).
  if (value.length === 55 && VERSION_00.test(value)) {
    const spanContext: SpanContext = {
      traceId: value.slice(3, 35),
      spanId: value.slice(36, 52),
      traceFlags: Number.parseInt(value.slice(53, 55), 16) & TraceFlags.SAMPLED,
      isRemote: true,
    };
    return trace.isSpanContextValid(spanContext) ? spanContext : undefined;
  }
  const match = TRACEPARENT.exec(value.trim());
  if (match === null) return undefined;
  const [, version, traceId = '', spanId = '', flags = '00'] = match;
  // Version 00 has exactly four fields; later versions may add more.
  if (version === 'ff' || (version === '00' && match[0].length !== 55)) return undefined;
  const spanContext: SpanContext = {
    traceId,
    spanId,
    traceFlags: Number.parseInt(flags, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  };
  return trace.isSpanContextValid(spanContext) ? spanContext : undefined;
}

/** Writes a span context as a W3C traceparent, version 00. */
export function formatTraceparent(spanContext: SpanContext): string {
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
}
