import { describe, expect, it } from 'vitest';
import { harrierTracing } from '../../../src/telemetry/harrier-tracing.js';
import { loadGlobalTracing, type TracingModules } from '../../../src/telemetry/load-tracing.js';

/** The error Node throws when an ES module imports a package that is not installed. */
function notInstalled(name: string): Error {
  return Object.assign(
    new Error(`Cannot find package '${name}' imported from /app/dist/telemetry/load-tracing.js`),
    {
      code: 'ERR_MODULE_NOT_FOUND',
    },
  );
}

describe('loadGlobalTracing', () => {
  describe('when @opentelemetry/api is installed', () => {
    it('gives replay tracing through the global provider', async () => {
      const tracing = await loadGlobalTracing();
      expect(typeof tracing?.replay.replay).toBe('function');
      // Without an SDK the global provider is a no-op and has nothing to flush.
      await expect(tracing?.flush()).resolves.toBeUndefined();
    });

    it("flushes the SDK's provider behind the global proxy", async () => {
      let flushed = 0;
      const sdkProvider = {
        forceFlush: async () => {
          flushed++;
        },
      };
      const modules: TracingModules = {
        trace: { getTracerProvider: () => ({ getDelegate: () => sdkProvider }) },
        harrierTracing,
      };
      const tracing = await loadGlobalTracing(() => Promise.resolve(modules));
      await tracing?.flush();
      expect(flushed).toBe(1);
    });
  });

  describe('when @opentelemetry/api is not installed', () => {
    it('resolves to undefined: no tracing', async () => {
      await expect(loadGlobalTracing(() => Promise.reject(notInstalled('@opentelemetry/api')))).resolves.toBe(
        undefined,
      );
    });
  });

  describe('when loading fails otherwise', () => {
    it('rejects with the error', async () => {
      const broken = notInstalled('something-else');
      await expect(loadGlobalTracing(() => Promise.reject(broken))).rejects.toBe(broken);
    });
  });
});
