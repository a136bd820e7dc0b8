import { HarrierError } from './harrier-error.js';

/** True when `error` says that the package `name` itself (not one of its dependencies) is not installed. */
function isMissing(error: unknown, name: string): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    error instanceof Error &&
    error.message.includes(`'${name}'`)
  );
}

/**
 * Requires optional peer dependencies, synchronously, in the order given.
 *
 * @remarks
 * A layer that needs a driver (bullmq and ioredis, pg) loads it with this when its module is
 * evaluated, instead of a static `import` (which fails at link time with Node's
 * ERR_MODULE_NOT_FOUND, before any check can run) or a top-level `await import()` (which makes the
 * entry point fail under `require()` with ERR_REQUIRE_ASYNC_MODULE). Being synchronous, it works
 * the same under `import` and under `require(esm)`.
 * @param load - a `require` made with `createRequire(import.meta.url)` in the layer's folder.
 * @param names - the packages, as `require` takes them.
 * @param layer - what needs them, for the message: `Harrier's Redis layer (harrier/redis ...)`.
 * @returns each package's module, in the order of `names`.
 * @throws HarrierError `missing-dependency` naming every missing package and `npm install` with all
 *   of `names`; what requiring a package throws otherwise (a broken install) as it is.
 */
export function requirePeers(load: NodeJS.Require, names: readonly string[], layer: string): unknown[] {
  const missing: string[] = [];
  let cause: unknown;
  // One at a time, so that the error names each missing package, not only the first.
  const modules = names.map((name) => {
    try {
      return load(name) as unknown;
    } catch (error) {
      if (!isMissing(error, name)) throw error;
      missing.push(name);
      cause ??= error;
      return undefined;
    }
  });
  if (missing.length > 0) {
    const which =
      names.length === 1 ? 'it is' : `${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'}`;
    throw new HarrierError(
      'missing-dependency',
      `${layer} needs ${names.join(' and ')}, and ${which} not installed: npm install ${names.join(' ')}`,
      { cause },
    );
  }
  return modules;
}
