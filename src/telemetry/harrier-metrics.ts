import {
  ValueType,
  createNoopMeter,
  diag,
  metrics,
  type Attributes,
  type Counter,
  type Histogram,
  type UpDownCounter,
  type Meter,
  type MeterProvider,
  type ObservableCallback,
  type ObservableGauge,
} from '@opentelemetry/api';
import type { OutgoingMessage } from '../broker/message-broker.js';
import type {
  MessageTelemetry,
  ProcessEnd,
  ProcessInfo,
  ProcessObservation,
  PublishOrigin,
  RefusedInfo,
  TelemetrySources,
} from '../dispatch/message-telemetry.js';
import type { PauseSubject } from '../dispatch/outage-breaker.js';
import { errorType } from './error-type.js';

/** Options of {@link harrierMetrics}. */
export interface HarrierMetricsOptions {
  /**
   * Where measurements go.
   * @defaultValue the global provider (`metrics.getMeterProvider()`), read on first use (at the
   *   latest `bus.start()`): a no-op unless an SDK registered one before then
   */
  readonly meterProvider?: MeterProvider;
  /**
   * The `messaging.system` attribute, e.g. the broker's name.
   * @defaultValue 'harrier'
   */
  readonly system?: string;
}

/** The instrumentation scope of Harrier's metrics. */
export const METER_NAME = 'harrier';

/**
 * Bucket boundaries (seconds) of `messaging.process.duration`, as the messaging semantic conventions
 * advise; a view of the SDK can replace them.
 */
export const PROCESS_DURATION_BUCKETS: readonly number[] = [
  0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
];

interface Instruments {
  /** False for the API's no-op meter: nothing is measured, so nothing is built. */
  readonly live: boolean;
  readonly duration: Histogram;
  readonly consumed: Counter;
  readonly sent: Counter;
  readonly deadLetters: Counter;
  readonly paused: UpDownCounter;
  readonly projectionLag: ObservableGauge;
  readonly queueDepth: ObservableGauge;
}

const NOTHING_TO_REMOVE = (): void => undefined;

/**
 * OpenTelemetry metrics for a bus: how long each handler call took and how it ended, messages
 * consumed and sent, dead letters by reason, and, read when the SDK collects, projection lag and the
 * depth of the broker's queues.
 *
 * @remarks
 * Instrument names and units follow the OpenTelemetry messaging semantic conventions where they
 * have one (`messaging.process.duration`, `messaging.client.consumed.messages`,
 * `messaging.client.sent.messages`); the table is in docs/telemetry.md. With no SDK registered the
 * global meter is the API's no-op one: each hook then costs one comparison and allocates nothing.
 * It makes no spans and gives messages no traceparent (they keep their cause's); combine it with
 * tracing through `harrierTelemetry()`.
 *
 * @example
 * ```ts
 * import { harrierMetrics } from 'harrier/telemetry';
 * const bus = createBus({ endpoint: 'orders', handlers, telemetry: harrierMetrics() });
 * ```
 */
export function harrierMetrics(options: HarrierMetricsOptions = {}): MessageTelemetry {
  const system = options.system ?? 'harrier';
  const provider = options.meterProvider;
  let instruments: Instruments | undefined;
  let source: MeterProvider | undefined;
  // The global provider is read again on each use (an identity check): one the SDK registers later
  // is picked up, as tracing does, instead of staying on the no-op meter for good.
  const get = (): Instruments => {
    const current = provider ?? metrics.getMeterProvider();
    if (instruments === undefined || current !== source) {
      source = current;
      instruments = createInstruments(current.getMeter(METER_NAME));
    }
    return instruments;
  };

  const processCall = (info: ProcessInfo): ProcessObservation | undefined => {
    const i = get();
    // No SDK: nothing to observe, and the pipeline runs the call as without telemetry.
    return i.live ? new MetricsObservation(i, info, system) : undefined;
  };

  const refused = (info: RefusedInfo): void => {
    const i = get();
    if (!i.live) return;
    const attributes: Attributes = {
      'messaging.system': system,
      'messaging.operation.name': 'process',
      'messaging.consumer.group.name': info.endpoint,
    };
    if (info.envelope !== undefined) attributes['messaging.destination.name'] = info.envelope.type;
    if (info.handler !== undefined) attributes['harrier.handler'] = info.handler;
    i.deadLetters.add(1, { ...attributes, 'harrier.dead_letter.reason': info.reason });
    attributes['harrier.outcome'] = 'dead-letter';
    attributes['error.type'] = errorType(info.error);
    i.consumed.add(1, attributes);
  };

  const pauseChanged = (subject: PauseSubject, paused: boolean): void => {
    const i = get();
    if (!i.live) return;
    const attributes: Attributes = {
      'messaging.system': system,
      'messaging.consumer.group.name': subject.endpoint,
    };
    if (subject.projection !== undefined) {
      attributes['harrier.projection'] = subject.projection.name;
      attributes['harrier.projection.partition'] =
        `${subject.projection.topic}/${subject.projection.partition}`;
    }
    i.paused.add(paused ? 1 : -1, attributes);
  };

  const publish = (
    messages: readonly OutgoingMessage[],
    origin: PublishOrigin | undefined,
    run: () => Promise<void>,
  ): Promise<void> => {
    const i = get();
    return i.live ? countAfter(i.sent, messages, system, origin, run) : run();
  };

  const observe = (sources: TelemetrySources): (() => void) => {
    const i = get();
    if (!i.live) return NOTHING_TO_REMOVE;
    const endpoint = sources.endpoint;
    const removals: (() => void)[] = [];
    if (sources.projectionLag !== undefined) {
      const readLag: ObservableCallback = async (result) => {
        const lags = await readGauge('projection lag', () => sources.projectionLag?.());
        for (const { projection, topic, partition, lag } of lags ?? []) {
          result.observe(lag, {
            'messaging.system': system,
            'messaging.consumer.group.name': endpoint,
            'harrier.projection': projection,
            'harrier.log.topic': topic,
            'messaging.destination.partition.id': String(partition),
          });
        }
      };
      i.projectionLag.addCallback(readLag);
      removals.push(() => {
        i.projectionLag.removeCallback(readLag);
      });
    }
    if (sources.queueDepths !== undefined) {
      const readDepths: ObservableCallback = async (result) => {
        const depths = await readGauge('queue depths', () => sources.queueDepths?.());
        for (const depth of depths ?? []) {
          const base = {
            'messaging.system': system,
            'messaging.consumer.group.name': endpoint,
            'harrier.queue': depth.queue,
          };
          result.observe(depth.waiting, { ...base, 'harrier.queue.state': 'waiting' });
          result.observe(depth.active, { ...base, 'harrier.queue.state': 'active' });
          result.observe(depth.delayed, { ...base, 'harrier.queue.state': 'delayed' });
        }
      };
      i.queueDepth.addCallback(readDepths);
      removals.push(() => {
        i.queueDepth.removeCallback(readDepths);
      });
    }
    return () => {
      for (const remove of removals.splice(0)) remove();
    };
  };

  return { traceparent: () => undefined, process: processCall, refused, pauseChanged, publish, observe };
}

function createInstruments(meter: Meter): Instruments {
  /** Options of a whole-number instrument. */
  const count = (description: string, unit: string) => ({ description, unit, valueType: ValueType.INT });
  return {
    live: meter !== createNoopMeter(),
    duration: meter.createHistogram('messaging.process.duration', {
      description: 'Duration of a handler call: middleware, handler and commit of what it recorded.',
      unit: 's',
      advice: { explicitBucketBoundaries: [...PROCESS_DURATION_BUCKETS] },
    }),
    consumed: meter.createCounter(
      'messaging.client.consumed.messages',
      count(
        'Messages delivered to a handler (each attempt), or refused before any handler ran.',
        '{message}',
      ),
    ),
    sent: meter.createCounter(
      'messaging.client.sent.messages',
      count('Messages handed to the broker (with error.type when the commit failed).', '{message}'),
    ),
    deadLetters: meter.createCounter(
      'harrier.dead_letters',
      count('Messages dead-lettered, by reason.', '{message}'),
    ),
    paused: meter.createUpDownCounter(
      'harrier.endpoint.paused',
      count(
        'Endpoints (and projection lanes) paused because a dependency is unreachable: 1 while paused, 0 once resumed.',
        '{endpoint}',
      ),
    ),
    projectionLag: meter.createObservableGauge(
      'harrier.projection.lag',
      count('Events in a log partition that a projection has not applied yet.', '{event}'),
    ),
    queueDepth: meter.createObservableGauge(
      'harrier.queue.depth',
      count('Messages in a broker queue an endpoint receives from, by state.', '{message}'),
    ),
  };
}

/** One handler call being measured: from `process()` to `end()`. */
class MetricsObservation implements ProcessObservation {
  readonly #instruments: Instruments;
  readonly #info: ProcessInfo;
  readonly #system: string;
  readonly #startedAt = performance.now();

  constructor(instruments: Instruments, info: ProcessInfo, system: string) {
    this.#instruments = instruments;
    this.#info = info;
    this.#system = system;
  }

  within<T>(run: () => Promise<T>): Promise<T> {
    return run();
  }

  end(end: ProcessEnd): void {
    const seconds = (performance.now() - this.#startedAt) / 1000;
    const info = this.#info;
    const attributes: Attributes = {
      'messaging.system': this.#system,
      'messaging.destination.name': info.envelope.type,
      'messaging.operation.name': 'process',
      'messaging.consumer.group.name': info.endpoint,
      'harrier.handler': info.handler,
      'harrier.handler.kind': info.handlerKind,
      'harrier.outcome': end.kind,
    };
    if ('error' in end) attributes['error.type'] = errorType(end.error);
    const i = this.#instruments;
    i.duration.record(seconds, attributes);
    // execute() hands the handler a message the caller made; no broker delivered it.
    if (!info.inProcess) i.consumed.add(1, attributes);
    if (end.kind === 'dead-letter') {
      i.deadLetters.add(1, {
        'messaging.system': this.#system,
        'messaging.destination.name': info.envelope.type,
        'messaging.consumer.group.name': info.endpoint,
        'harrier.handler': info.handler,
        'harrier.dead_letter.reason': end.reason,
      });
    }
  }
}

/** Runs a commit, then counts its messages as sent, with the error's type when it failed. */
async function countAfter(
  sent: Counter,
  messages: readonly OutgoingMessage[],
  system: string,
  origin: PublishOrigin | undefined,
  run: () => Promise<void>,
): Promise<void> {
  try {
    await run();
  } catch (error) {
    countSent(sent, messages, system, origin, errorType(error));
    throw error;
  }
  countSent(sent, messages, system, origin, undefined);
}

/** Adds each message to the sent counter, one addition per (type, kind) of the commit. */
function countSent(
  sent: Counter,
  messages: readonly OutgoingMessage[],
  system: string,
  origin: PublishOrigin | undefined,
  failure: string | undefined,
): void {
  const byType = new Map<string, { readonly message: OutgoingMessage; count: number }>();
  for (const message of messages) {
    const key = `${message.kind}\u0000${message.type}`;
    const entry = byType.get(key);
    if (entry === undefined) byType.set(key, { message, count: 1 });
    else entry.count++;
  }
  for (const { message, count } of byType.values()) {
    const attributes: Attributes = {
      'messaging.system': system,
      'messaging.destination.name': message.type,
      'messaging.operation.name': message.kind === 'event' ? 'publish' : 'send',
    };
    if (origin !== undefined) attributes['harrier.origin'] = origin;
    if (failure !== undefined) attributes['error.type'] = failure;
    sent.add(count, attributes);
  }
}

/** Reads a gauge's source; a failure skips this collection's observations (and is logged by the API's diag). */
async function readGauge<T>(what: string, read: () => Promise<T> | undefined): Promise<T | undefined> {
  try {
    return await read();
  } catch (error) {
    diag.warn(`harrier: reading ${what} failed; skipped this collection`, error);
    return undefined;
  }
}
