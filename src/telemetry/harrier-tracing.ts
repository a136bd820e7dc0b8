import {
  ROOT_CONTEXT,
  SpanKind,
  TraceFlags,
  SpanStatusCode,
  context as otelContext,
  trace,
  type Attributes,
  type Link,
  type Span,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import type { OutgoingMessage } from '../broker/message-broker.js';
import type { ReplayTraceInfo } from '../dead-letters/replay-dead-letters.js';
import type {
  MessageTelemetry,
  ProcessEnd,
  ProcessInfo,
  ProcessObservation,
  PublishOrigin,
  RefusedInfo,
} from '../dispatch/message-telemetry.js';
import { traceparentOfBody } from '../messages/codec.js';
import type { OutgoingTraceInfo } from '../messages/prepare-message.js';
import { errorType } from './error-type.js';
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

/** Most links a batch `send` span carries (one per message created in a traced context). */
export const MAX_BATCH_LINKS = 128;

/**
 * OpenTelemetry tracing for a bus: a CONSUMER `process <type>` span around each handler call (one
 * per delivery attempt), a PRODUCER span for each outgoing message (`send`/`publish <type>`, or
 * `create <type>` for a message committed later with others), whose context the message carries as
 * its traceparent, a CLIENT `send` span for each commit of a handler's messages or of an outbox
 * relay's batch, and an INTERNAL `replay <type>` span for each dead letter replayed.
 *
 * @remarks
 * Spans follow the OpenTelemetry messaging semantic conventions; the table is in docs/telemetry.md.
 * The handler runs with its `process` span active, so spans it starts, and the messages it sends or
 * publishes, belong to that trace. The span records a scheduled retry or a dead letter as an event.
 * The traceparent is written into the envelope's meta before it is signed, so signing covers it.
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

  // No provider given and none registered: the global one is the API's no-op, and every hook
  // returns before it builds a span (the "no-op check" the docs promise).
  const untraced = (): boolean => provider === undefined && isGlobalNoop();

  const processCall = (info: ProcessInfo): ProcessObservation | undefined => {
    if (untraced()) return undefined;
    const span = startProcessSpan(getTracer(), info, system, relation);
    return {
      within: (run) => otelContext.with(trace.setSpan(otelContext.active(), span), run),
      sagaInstance: (instance) => {
        span.setAttribute('harrier.saga.name', instance.saga);
        span.setAttribute('harrier.saga.id', instance.id);
      },
      end: (end) => {
        endProcessSpan(span, end);
      },
    };
  };

  const refused = (info: RefusedInfo): void => {
    if (untraced()) return;
    const type = info.envelope?.type ?? 'unknown';
    const producer = parseTraceparent(info.envelope?.meta.traceparent);
    const span = getTracer().startSpan(`process ${type}`, {
      kind: SpanKind.CONSUMER,
      root: true,
      attributes: {
        ...(info.envelope !== undefined
          ? envelopeAttributes(system, 'process', 'process', info.envelope)
          : {
              'messaging.system': system,
              'messaging.operation.name': 'process',
              'messaging.operation.type': 'process',
            }),
        'messaging.consumer.group.name': info.endpoint,
        'harrier.attempt': info.attempt,
        ...(info.handler !== undefined ? { 'harrier.handler': info.handler } : {}),
      },
      links: producer === undefined ? [] : [{ context: producer }],
    });
    endProcessSpan(span, { kind: 'dead-letter', reason: info.reason, error: info.error });
  };

  const traceparent = (message: OutgoingTraceInfo): string | undefined => {
    if (untraced()) return undefined;
    const operation = message.deferred ? 'create' : message.kind === 'event' ? 'publish' : 'send';
    const span = getTracer().startSpan(`${operation} ${message.type}`, {
      kind: SpanKind.PRODUCER,
      attributes: {
        'messaging.system': system,
        'messaging.destination.name': message.type,
        'messaging.operation.name': operation,
        'messaging.operation.type': message.deferred ? 'create' : 'send',
        'messaging.message.id': message.id,
        'messaging.message.conversation_id': message.correlationId,
      },
    });
    const spanContext = span.spanContext();
    span.end();
    return trace.isSpanContextValid(spanContext) ? formatTraceparent(spanContext) : undefined;
  };

  const publish = (
    messages: readonly OutgoingMessage[],
    origin: PublishOrigin | undefined,
    run: () => Promise<void>,
  ): Promise<void> => {
    // bus.send / publish / schedule: the message's own PRODUCER span stands for the send.
    if (origin === undefined || untraced()) return run();
    const span = startSendSpan(getTracer(), messages, origin, system);
    return otelContext.with(trace.setSpan(otelContext.active(), span), () => endAfter(span, run()));
  };

  const replay = {
    replay: <T>(info: ReplayTraceInfo, run: () => Promise<T>): Promise<T> => {
      const span = startReplaySpan(getTracer(), info, system);
      return otelContext.with(trace.setSpan(otelContext.active(), span), () => endAfter(span, run()));
    },
  };

  return { traceparent, process: processCall, refused, publish, replay };
}

/** The provider behind the global proxy last looked at, and whether it was the API's no-op one. */
let lastDelegate: TracerProvider | undefined;
let lastWasNoop = false;

/** An unsampled remote parent for the probe: a sampler that follows its parent (the SDK's default) drops the probe. */
const PROBE_PARENT = trace.setSpanContext(ROOT_CONTEXT, {
  traceId: '0af7651916cd43dd8448eb211c80319c',
  spanId: 'b7ad6b7169203331',
  traceFlags: TraceFlags.NONE,
  isRemote: true,
});

/**
 * Whether the global tracer provider is still the API's no-op one: the provider behind the global
 * proxy is probed once each time it changes (an SDK registers). The API's no-op tracer hands back
 * the parent's own span context; an SDK's tracer makes a span of its own (with a new span id), which
 * its default parent-based sampler drops unrecorded, so no span processor sees it. The probe starts
 * from the root context, so a context that suppresses tracing cannot fool it.
 */
function isGlobalNoop(): boolean {
  const global = trace.getTracerProvider() as TracerProvider & { getDelegate?: () => TracerProvider };
  const delegate = typeof global.getDelegate === 'function' ? global.getDelegate() : global;
  if (delegate !== lastDelegate) {
    const probe = delegate.getTracer(TRACER_NAME).startSpan('harrier.probe', {}, PROBE_PARENT);
    lastWasNoop = !probe.isRecording() && probe.spanContext().spanId === 'b7ad6b7169203331';
    // A recording probe (a sampler that ignores its parent) is ended as what it is.
    if (probe.isRecording()) probe.end();
    lastDelegate = delegate;
  }
  return lastWasNoop;
}

/** Ends `span` when `work` settles, recording its failure. */
async function endAfter<T>(span: Span, work: Promise<T>): Promise<T> {
  try {
    const result = await work;
    span.end();
    return result;
  } catch (error) {
    recordFailure(span, error);
    span.end();
    throw error;
  }
}

function envelopeAttributes(
  system: string,
  operationName: string,
  operationType: string,
  envelope: NonNullable<RefusedInfo['envelope']>,
): Attributes {
  return {
    'messaging.system': system,
    'messaging.destination.name': envelope.type,
    'messaging.operation.name': operationName,
    'messaging.operation.type': operationType,
    'messaging.message.id': envelope.id,
    'messaging.message.conversation_id': envelope.meta.correlationId,
  };
}

function startProcessSpan(
  tracer: Tracer,
  info: ProcessInfo,
  system: string,
  relation: 'link' | 'parent',
): Span {
  const { envelope } = info;
  const { meta } = envelope;
  const producer = info.inProcess ? undefined : parseTraceparent(meta.traceparent);
  // One literal, so every span's attributes share one object shape.
  const attributes: Attributes = {
    'messaging.system': system,
    'messaging.destination.name': envelope.type,
    'messaging.operation.name': 'process',
    'messaging.operation.type': 'process',
    'messaging.message.id': envelope.id,
    'messaging.message.conversation_id': meta.correlationId,
    'messaging.consumer.group.name': info.endpoint,
    'harrier.handler': info.handler,
    'harrier.handler.kind': info.handlerKind,
    'harrier.attempt': info.attempt,
  };
  if (meta.partitionKey !== undefined) attributes['harrier.partition_key'] = meta.partitionKey;
  const position = info.position;
  if (position !== undefined) {
    attributes['messaging.destination.partition.id'] = String(position.partition);
    attributes['harrier.log.topic'] = position.topic;
    attributes['harrier.log.offset'] = position.offset;
  }
  const name = `process ${envelope.type}`;
  // execute() runs in the caller's context; a delivery starts its own trace or continues the producer's.
  if (info.inProcess) return tracer.startSpan(name, { kind: SpanKind.CONSUMER, attributes });
  const links: Link[] = producer === undefined ? [] : [{ context: producer }];
  if (relation === 'parent' && producer !== undefined) {
    return tracer.startSpan(
      name,
      { kind: SpanKind.CONSUMER, attributes, links },
      trace.setSpanContext(otelContext.active(), producer),
    );
  }
  return tracer.startSpan(name, { kind: SpanKind.CONSUMER, attributes, links, root: true });
}

/** Records how the call ended (a retry or a dead letter as an event) and ends the span. */
function endProcessSpan(span: Span, end: ProcessEnd): void {
  switch (end.kind) {
    case 'handled':
      break;
    case 'retry':
      recordFailure(span, end.error);
      span.addEvent('harrier.retry_scheduled', {
        'harrier.retry.at': new Date(end.retryAt).toISOString(),
        'harrier.retry.delay_ms': end.delayMs,
      });
      break;
    case 'dead-letter':
      recordFailure(span, end.error);
      span.addEvent('harrier.dead_lettered', { 'harrier.dead_letter.reason': end.reason });
      break;
    case 'failed':
      recordFailure(span, end.error);
      break;
    case 'abandoned':
      span.addEvent('harrier.released');
      break;
    case 'paused':
      // An outage is not the message's failure: recorded on the span, its status left unset.
      span.addEvent('harrier.endpoint.paused', { 'error.type': errorType(end.error) });
      break;
  }
  span.end();
}

function startSendSpan(
  tracer: Tracer,
  messages: readonly OutgoingMessage[],
  origin: PublishOrigin,
  system: string,
): Span {
  const first = messages[0];
  const oneType = first !== undefined && messages.every((m) => m.type === first.type);
  const links: Link[] = [];
  for (const message of messages) {
    if (links.length === MAX_BATCH_LINKS) break;
    const created = parseTraceparent(message.traceparent);
    if (created !== undefined) {
      links.push({ context: created, attributes: { 'messaging.message.id': message.id } });
    }
  }
  const attributes: Attributes = {
    'messaging.system': system,
    'messaging.operation.name': 'send',
    'messaging.operation.type': 'send',
    'messaging.batch.message_count': messages.length,
    'harrier.origin': origin,
  };
  if (oneType) attributes['messaging.destination.name'] = first.type;
  if (messages.length === 1 && first !== undefined) attributes['messaging.message.id'] = first.id;
  return tracer.startSpan(oneType ? `send ${first.type}` : 'send', {
    kind: SpanKind.CLIENT,
    attributes,
    links,
  });
}

function startReplaySpan(tracer: Tracer, info: ReplayTraceInfo, system: string): Span {
  const { record } = info;
  const type = record.type ?? 'unknown';
  const attributes: Attributes = {
    'messaging.system': system,
    'messaging.destination.name': type,
    'messaging.consumer.group.name': record.endpoint,
    'harrier.dead_letter.id': record.id,
    'harrier.dead_letter.reason': record.reason,
    'harrier.replay.via': info.via,
  };
  if (record.messageId !== undefined) attributes['messaging.message.id'] = record.messageId;
  if (record.handler !== undefined) attributes['harrier.handler'] = record.handler;
  if (info.by !== undefined) attributes['harrier.replay.by'] = info.by;
  const original = parseTraceparent(traceparentOfBody(record.envelope));
  return tracer.startSpan(`replay ${type}`, {
    kind: SpanKind.INTERNAL,
    attributes,
    links: original === undefined ? [] : [{ context: original }],
  });
}

function recordFailure(span: Span, error: unknown): void {
  span.setAttribute('error.type', errorType(error));
  if (error instanceof Error) span.recordException(error);
  span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(error) });
}

function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (
    typeof error === 'object' &&
    error !== null &&
    typeof (error as { message?: unknown }).message === 'string'
  ) {
    return (error as { message: string }).message;
  }
  try {
    return String(error);
  } catch {
    // An object without a prototype (or with a throwing toString) has no text of its own.
    return Object.prototype.toString.call(error);
  }
}
