import {
  SpanKind,
  SpanStatusCode,
  context as otelContext,
  trace,
  type Attributes,
  type Link,
  type Span,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import type { MessageTelemetry } from '../dispatch/message-telemetry.js';
import type { Middleware, MiddlewareContext } from '../dispatch/middleware.js';
import type { OutgoingTraceInfo } from '../messages/prepare-message.js';
import { formatTraceparent, parseTraceparent } from './traceparent.js';

/** Options of {@link harrierTracing}. */
export interface HarrierTracingOptions {
  /**
   * Where spans go.
   * @defaultValue the global provider (`trace.getTracerProvider()`), a no-op until an SDK registers one
   */
  readonly tracerProvider?: TracerProvider;
  /**
   * How a `process` span relates to the producer span named by the message's traceparent: `link`
   * starts a new trace with a link to it (the messaging conventions' default), `parent` continues
   * the producer's trace as its child (and links it as well).
   * @defaultValue 'link'
   */
  readonly relation?: 'link' | 'parent';
  /**
   * The `messaging.system` attribute, e.g. the broker's name.
   * @defaultValue 'harrier'
   */
  readonly system?: string;
}

/** The instrumentation scope of Harrier's spans. */
export const TRACER_NAME = 'harrier';

/**
 * OpenTelemetry tracing for a bus: a CONSUMER `process <type>` span around each handler call (one
 * per delivery attempt), and a PRODUCER `send <type>` / `publish <type>` span for each outgoing
 * message, whose context the message carries as its traceparent.
 *
 * @remarks
 * Spans follow the OpenTelemetry messaging semantic conventions; the table is in docs/telemetry.md.
 * The handler runs with its `process` span active, so spans it starts, and the messages it sends or
 * publishes, belong to that trace. The traceparent is written into the envelope's meta before it
 * is signed, so signing covers it.
 *
 * @example
 * ```ts
 * import { harrierTracing } from 'harrier/telemetry';
 * const bus = createBus({ endpoint: 'orders', handlers, telemetry: harrierTracing() });
 * ```
 */
export function harrierTracing(options: HarrierTracingOptions = {}): MessageTelemetry {
  const system = options.system ?? 'harrier';
  const relation = options.relation ?? 'link';
  const provider = options.tracerProvider;
  let tracer: Tracer | undefined;
  // Resolved on first use, so a provider the SDK registers after the bus is made is still found.
  const getTracer = (): Tracer => (tracer ??= (provider ?? trace.getTracerProvider()).getTracer(TRACER_NAME));

  const middleware: Middleware = {
    name: 'harrier-tracing',
    around: (call, next) => {
      const span = startProcessSpan(getTracer(), call, system, relation);
      return otelContext.with(trace.setSpan(otelContext.active(), span), async () => {
        try {
          const result = await next();
          span.end();
          return result;
        } catch (error) {
          recordFailure(span, error);
          span.end();
          throw error;
        }
      });
    },
  };

  const traceparent = (message: OutgoingTraceInfo): string | undefined => {
    const operation = message.kind === 'event' ? 'publish' : 'send';
    const span = getTracer().startSpan(`${operation} ${message.type}`, {
      kind: SpanKind.PRODUCER,
      attributes: {
        'messaging.system': system,
        'messaging.destination.name': message.type,
        'messaging.operation.name': operation,
        'messaging.operation.type': 'send',
        'messaging.message.id': message.id,
        'messaging.message.conversation_id': message.correlationId,
      },
    });
    const spanContext = span.spanContext();
    span.end();
    return trace.isSpanContextValid(spanContext) ? formatTraceparent(spanContext) : undefined;
  };

  return { middleware, traceparent };
}

function startProcessSpan(
  tracer: Tracer,
  call: MiddlewareContext,
  system: string,
  relation: 'link' | 'parent',
): Span {
  const { envelope } = call.message;
  const producer = call.inProcess ? undefined : parseTraceparent(envelope.meta.traceparent);
  const attributes: Attributes = {
    'messaging.system': system,
    'messaging.destination.name': envelope.type,
    'messaging.operation.name': 'process',
    'messaging.operation.type': 'process',
    'messaging.message.id': envelope.id,
    'messaging.message.conversation_id': envelope.meta.correlationId,
    'messaging.consumer.group.name': call.message.endpoint,
    'harrier.handler': call.handler,
    'harrier.handler.kind': call.handlerKind,
    'harrier.attempt': call.message.attempt,
  };
  if (envelope.meta.partitionKey !== undefined) {
    attributes['harrier.partition_key'] = envelope.meta.partitionKey;
  }
  const links: Link[] = producer === undefined ? [] : [{ context: producer }];
  const name = `process ${envelope.type}`;
  const spanOptions = { kind: SpanKind.CONSUMER, attributes, links };
  // execute() runs in the caller's context; a delivery starts its own trace or continues the producer's.
  if (call.inProcess) return tracer.startSpan(name, spanOptions);
  if (relation === 'parent' && producer !== undefined) {
    return tracer.startSpan(name, spanOptions, trace.setSpanContext(otelContext.active(), producer));
  }
  return tracer.startSpan(name, { ...spanOptions, root: true });
}

function recordFailure(span: Span, error: unknown): void {
  const name = error instanceof Error ? error.name : typeof error;
  span.setAttribute('error.type', name);
  if (error instanceof Error) span.recordException(error);
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: error instanceof Error ? error.message : String(error),
  });
}
