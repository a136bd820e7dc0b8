/**
 * zod, once checked to be a version Harrier supports: every module of src that uses a zod value
 * imports `z` from here, and its types from `import type { z } from 'zod'` as usual.
 *
 * @remarks
 * Harrier builds schemas with zod 4's API (`z.iso`, `z.regexes`, ...) when its modules load. zod 3
 * (which npm installs only when forced past the peer range, e.g. `--legacy-peer-deps`) has none of
 * it, so without this check importing `harrier` would fail with a raw `TypeError: Cannot read
 * properties of undefined`, pointing at Harrier's code instead of the app's install.
 */
import { z } from 'zod';
import { HarrierError } from '../errors/harrier-error.js';

/** The zod versions Harrier supports, as `npm install` takes them. */
export const SUPPORTED_ZOD = '^4';

/** The major version of the zod module `zod`, or `undefined` for zod 3 and older (no `z.core.version`). */
export function zodMajorOf(zod: object): number | undefined {
  const major = (zod as { core?: { version?: { major?: unknown } } }).core?.version?.major;
  return typeof major === 'number' ? major : undefined;
}

/**
 * Throws unless `zod` is zod 4 or later.
 * @throws HarrierError `missing-dependency` naming `npm install zod@^4`.
 */
export function assertSupportedZod(zod: object): void {
  const major = zodMajorOf(zod);
  if (major !== undefined && major >= 4) return;
  throw new HarrierError(
    'missing-dependency',
    `Harrier needs zod 4, and the zod it loaded is zod ${major === undefined ? '3 or older' : String(major)}: npm install zod@${SUPPORTED_ZOD} (npm ls zod shows which copies the app has)`,
  );
}

assertSupportedZod(z);

export { z };
