import * as zod from 'zod';
import { describe, expect, it } from 'vitest';
import { HarrierError } from '../../../src/errors/harrier-error.js';
import { assertSupportedZod, zodMajorOf } from '../../../src/messages/supported-zod.js';

describe('assertSupportedZod', () => {
  describe('when given the installed zod', () => {
    it('accepts it (zod 4)', () => {
      expect(zodMajorOf(zod.z)).toBe(4);
      expect(() => {
        assertSupportedZod(zod.z);
      }).not.toThrow();
    });
  });

  // zod 3 itself is loaded by test/e2e/packed-install.test.ts (an app where Harrier resolves zod 3).
  describe('when given a zod without z.core.version (zod 3 and older)', () => {
    it('throws missing-dependency naming npm install zod@^4', () => {
      let thrown: unknown;
      try {
        assertSupportedZod({ string: () => ({}) });
      } catch (error) {
        thrown = error;
      }
      expect(HarrierError.is(thrown, 'missing-dependency')).toBe(true);
      expect((thrown as Error).message).toBe(
        'Harrier needs zod 4, and the zod it loaded is zod 3 or older: npm install zod@^4 (npm ls zod shows which copies the app has)',
      );
    });
  });
});
