import { diag } from '@opentelemetry/api';
import type { ReplayTraceInfo } from '../dead-letters/replay-dead-letters.js';
import type { MessageTelemetry, ProcessInfo, ProcessObservation } from '../dispatch/message-telemetry.js';
import { harrierMetrics, type HarrierMetricsOptions } from './harrier-metrics.js';
import { harrierTracing, type HarrierTracingOptions } from './harrier-tracing.js';

/** Options of {@link harrierTelemetry}. */
export interface HarrierTelemetryOptions {
  /**
   * Spans ({@link harrierTracing}), or `false` for none.
   * @defaultValue `{}` (tracing on, with its defaults)
   */
  readonly tracing?: HarrierTracingOptions | false;
  /**
   * Metrics ({@link harrierMetrics}), or `false` for none.
   * @defaultValue `{}` (metrics on, with their defaults)
   */
  readonly metrics?: HarrierMetricsOptions | false;
}

/**
 * OpenTelemetry tracing and metrics for a bus in one {@link MessageTelemetry}: what
 * `harrierTracing()` and `harrierMetrics()` do, together.
 *
 * @remarks
 * Tracing is the outer one: a handler call runs inside its `process` span, and the duration the
 * histogram records is measured inside that span (started after it, ended before it), so it is the
 * span's work without the span's own bookkeeping, and anything metrics does runs with the span active.
 * Likewise a commit is counted inside its `send` span.
 *
 * @example
 * ```ts
 * import { harrierTelemetry } from 'harrier/telemetry';
 * const bus = createBus({ endpoint: 'orders', handlers, telemetry: harrierTelemetry() });
 * ```
 */
export function harrierTelemetry(options: HarrierTelemetryOptions = {}): MessageTelemetry {
  const parts: MessageTelemetry[] = [];
  if (options.tracing !== false) parts.push(harrierTracing(options.tracing ?? {}));
  if (options.metrics !== false) parts.push(harrierMetrics(options.metrics ?? {}));
  return combineTelemetry(parts);
}

/**
 * One telemetry out of several, the first outermost: each hook calls every part that has it, and
 * the traceparent is the first one a part gives.
 *
 * @remarks
 * Each part is isolated from the others: a part whose hook throws is reported through the
 * OpenTelemetry API's `diag` and left out of that call, and the others still start, end and stop
 * what they began (a span another part started is never left open because a later part threw).
 */
export function combineTelemetry(parts: readonly MessageTelemetry[]): MessageTelemetry {
  const [only, ...more] = parts;
  if (only !== undefined && more.length === 0) return only;
  const publishers = parts.flatMap((part) => (part.publish === undefined ? [] : [part.publish.bind(part)]));
  const refusers = parts.flatMap((part) => (part.refused === undefined ? [] : [part.refused.bind(part)]));
  const observers = parts.flatMap((part) => (part.observe === undefined ? [] : [part.observe.bind(part)]));
  const pauseListeners = parts.flatMap((part) =>
    part.pauseChanged === undefined ? [] : [part.pauseChanged.bind(part)],
  );
  const replayers = parts.flatMap((part) => (part.replay === undefined ? [] : [part.replay]));
  return {
    traceparent: (message) => {
      for (const part of parts) {
        const traceparent = isolated('traceparent', () => part.traceparent(message));
        if (traceparent !== undefined) return traceparent;
      }
      return undefined;
    },
    process: (info: ProcessInfo): ProcessObservation | undefined => {
      const observations = parts.flatMap((part) => isolated('process', () => part.process(info)) ?? []);
      if (observations.length <= 1) return observations[0];
      return {
        within: (run) =>
          observations.reduceRight((inner, observation) => () => observation.within(inner), run)(),
        sagaInstance: (instance) => {
          for (const observation of observations) {
            isolated('sagaInstance', () => observation.sagaInstance?.(instance));
          }
        },
        end: (end) => {
          for (let index = observations.length - 1; index >= 0; index--) {
            isolated('end', () => observations[index]?.end(end));
          }
        },
      };
    },
    refused: (info) => {
      for (const refused of refusers)
        isolated('refused', () => {
          refused(info);
        });
    },
    pauseChanged: (subject, paused) => {
      for (const listener of pauseListeners)
        isolated('pauseChanged', () => {
          listener(subject, paused);
        });
    },
    publish: (messages, origin, run) =>
      publishers.reduceRight<() => Promise<void>>(
        (inner, publish) => () => publish(messages, origin, inner),
        run,
      )(),
    ...(replayers.length > 0
      ? {
          replay: {
            replay: <T>(info: ReplayTraceInfo, run: () => Promise<T>): Promise<T> =>
              replayers.reduceRight<() => Promise<T>>(
                (inner, replayer) => () => replayer.replay(info, inner),
                run,
              )(),
          },
        }
      : {}),
    observe: (sources) => {
      const stops = observers.flatMap((observe) => isolated('observe', () => observe(sources)) ?? []);
      return () => {
        for (const stop of stops) isolated('unobserve', stop);
      };
    },
  };
}

/** Runs one part's hook; what it throws is reported through `diag` and the hook counts as absent. */
function isolated<T>(hook: string, call: () => T): T | undefined {
  try {
    return call();
  } catch (error) {
    diag.error(`harrier telemetry: a part's ${hook} threw; left out`, error);
    return undefined;
  }
}
