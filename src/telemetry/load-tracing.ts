import type { ReplayTelemetry } from '../dead-letters/replay-dead-letters.js';
import type { harrierTracing } from './harrier-tracing.js';

/** Tracing through the globally registered OpenTelemetry SDK, for a short-lived process such as the CLI. */
export interface GlobalTracing {
  /** Traces each dead letter replayed (`replay <type>` spans). */
  readonly replay: ReplayTelemetry;
  /**
   * Exports the spans the global provider still holds (a batch span processor's queue), so a
   * process about to exit loses none; resolves at once without an SDK.
   */
  flush(): Promise<void>;
}

/** What {@link loadGlobalTracing} imports: the OpenTelemetry API's `trace` and {@link harrierTracing}. */
export interface TracingModules {
  readonly trace: { getTracerProvider(): object };
  readonly harrierTracing: typeof harrierTracing;
}

/** How long the CLI waits for its spans to be exported before it exits anyway, in ms. */
export const FLUSH_DEADLINE_MS = 5_000;

const importTracing = async (): Promise<TracingModules> => {
  const [api, tracing] = await Promise.all([import('@opentelemetry/api'), import('./harrier-tracing.js')]);
  return { trace: api.trace, harrierTracing: tracing.harrierTracing };
};

/**
 * Loads tracing through the global OpenTelemetry provider when `@opentelemetry/api` (an optional
 * peer) is installed; without it, resolves to `undefined` (no tracing), silently.
 *
 * @remarks
 * For the `harrier` CLI: it imports this module statically and OpenTelemetry only here, on demand,
 * so the CLI runs without the package. Spans go wherever the SDK the user registered sends them
 * (e.g. `NODE_OPTIONS='--import ./otel-setup.mjs' harrier dlq replay …`); without an SDK the global
 * provider is a no-op.
 * @param load - imports the modules (tests pass their own).
 * @throws what importing throws, other than the package being missing.
 */
export async function loadGlobalTracing(
  load: () => Promise<TracingModules> = importTracing,
): Promise<GlobalTracing | undefined> {
  let modules: TracingModules;
  try {
    modules = await load();
  } catch (error) {
    if (isMissingApi(error)) return undefined;
    throw error;
  }
  const replay = modules.harrierTracing().replay;
  if (replay === undefined) return undefined;
  const { trace } = modules;
  return {
    replay,
    flush: async () => {
      // The global provider is a proxy; the SDK's provider behind it may have forceFlush.
      const global = trace.getTracerProvider() as { getDelegate?: () => object };
      const provider = (global.getDelegate?.() ?? global) as { forceFlush?: () => Promise<unknown> };
      if (typeof provider.forceFlush !== 'function') return;
      // A collector that is down must not hold the command for a batch processor's export timeout.
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          reject(new Error(`the exporter did not finish within ${FLUSH_DEADLINE_MS} ms`));
        }, FLUSH_DEADLINE_MS);
      });
      try {
        await Promise.race([provider.forceFlush(), deadline]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

function isMissingApi(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    error instanceof Error &&
    error.message.includes('@opentelemetry/api')
  );
}
