import { expect } from 'vitest';
import { HarrierError } from '../errors/harrier-error.js';
import type { HarrierErrorCode } from '../errors/harrier-error-code.js';

/** The error `action` rejects (or throws) with; fails the test when it succeeds. */
export async function failureOf(action: () => Promise<unknown>): Promise<unknown> {
  try {
    await action();
  } catch (error) {
    return error;
  }
  return expect.fail('expected a rejection, but the call succeeded');
}

/**
 * Asserts `error` is a HarrierError (of any installed copy) with exactly `code`, not a former
 * spelling, so every implementation of a contract fails alike.
 */
export function expectCode(error: unknown, code: HarrierErrorCode): void {
  expect(HarrierError.is(error, code), `expected HarrierError ${code}, got ${String(error)}`).toBe(true);
  expect(error).toHaveProperty('code', code);
}
