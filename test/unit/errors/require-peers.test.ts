import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { HarrierError } from '../../../src/errors/harrier-error.js';
import { requirePeers } from '../../../src/errors/require-peers.js';

const load = createRequire(import.meta.url);
const LAYER = "Harrier's test layer";

/** A package name no registry has, so `require` reports it missing. */
const MISSING = 'harrier-test-missing-peer';
const ALSO_MISSING = 'harrier-test-missing-peer-2';

/** What requirePeers throws, or `undefined`. */
function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('requirePeers', () => {
  describe('when every package is installed', () => {
    it('returns each module, in the order given', () => {
      const [bullmq, ioredis] = requirePeers(load, ['bullmq', 'ioredis'], LAYER);
      expect(bullmq).toBe(load('bullmq'));
      expect(ioredis).toBe(load('ioredis'));
    });
  });

  describe('when a package is not installed', () => {
    it('throws missing-dependency naming it and npm install with every package', () => {
      const error = thrownBy(() => requirePeers(load, ['bullmq', MISSING], LAYER));
      expect(HarrierError.is(error, 'missing-dependency')).toBe(true);
      expect((error as Error).message).toBe(
        `${LAYER} needs bullmq and ${MISSING}, and ${MISSING} is not installed: npm install bullmq ${MISSING}`,
      );
      expect((error as Error).cause).toMatchObject({ code: 'MODULE_NOT_FOUND' });
    });

    it('names every missing package, not only the first', () => {
      const error = thrownBy(() => requirePeers(load, [MISSING, ALSO_MISSING], LAYER));
      expect((error as Error).message).toBe(
        `${LAYER} needs ${MISSING} and ${ALSO_MISSING}, and ${MISSING} and ${ALSO_MISSING} are not installed: npm install ${MISSING} ${ALSO_MISSING}`,
      );
    });

    it('says "it is not installed" for a layer of one package', () => {
      const error = thrownBy(() => requirePeers(load, [MISSING], LAYER));
      expect((error as Error).message).toBe(
        `${LAYER} needs ${MISSING}, and it is not installed: npm install ${MISSING}`,
      );
    });
  });

  describe('when an installed package fails to load', () => {
    it('throws what requiring it threw, a missing dependency of the package included', () => {
      const broken = Object.assign(new Error(`Cannot find module 'msgpackr'`), { code: 'MODULE_NOT_FOUND' });
      // Only the call matters to requirePeers; the rest of NodeJS.Require it never reads.
      const failing = (() => {
        throw broken;
      }) as unknown as NodeJS.Require;
      expect(thrownBy(() => requirePeers(failing, ['bullmq'], LAYER))).toBe(broken);
    });
  });
});
