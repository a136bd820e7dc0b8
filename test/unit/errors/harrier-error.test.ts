import { describe, expect, it, vi } from 'vitest';
import {
  HARRIER_ERROR_CODES,
  HARRIER_ERROR_CODE_ALIASES,
  HarrierError,
  StaleDeliveryError,
  UnknownTopicError,
  UnrecoverableError,
  type HarrierErrorCode,
  type HarrierErrorCodeAlias,
} from '../../../src/index.js';

/** A HarrierError as an older copy of Harrier made it: the brand, and a code it used to throw. */
function fromOlderCopy(code: string): Error {
  const error = new Error('thrown by an older copy');
  Object.defineProperty(error, Symbol.for('harrier/HarrierError'), { value: true });
  return Object.assign(error, { code });
}

describe('HarrierError', () => {
  describe('.is', () => {
    describe('when no code is given', () => {
      it('is true for a HarrierError and each of its subclasses', () => {
        expect(HarrierError.is(new HarrierError('invalid-option', 'bad option'))).toBe(true);
        expect(HarrierError.is(new UnknownTopicError('orders'))).toBe(true);
        expect(HarrierError.is(new StaleDeliveryError('d-1'))).toBe(true);
        expect(HarrierError.is(new UnrecoverableError('give up'))).toBe(true);
      });

      it('is false for anything without the brand', () => {
        expect(HarrierError.is(new Error('plain'))).toBe(false);
        expect(HarrierError.is(Object.assign(new Error('look-alike'), { code: 'invalid-option' }))).toBe(
          false,
        );
        expect(HarrierError.is({ name: 'HarrierError', code: 'invalid-option' })).toBe(false);
        expect(HarrierError.is(null)).toBe(false);
        expect(HarrierError.is(undefined)).toBe(false);
        expect(HarrierError.is('invalid-option')).toBe(false);
      });
    });

    describe('when a code is given', () => {
      it('is true only for a HarrierError with that code', () => {
        const error = new UnknownTopicError('orders');
        expect(HarrierError.is(error, 'unknown-topic')).toBe(true);
        expect(HarrierError.is(error, 'invalid-topic')).toBe(false);
        expect(HarrierError.is(new HarrierError('log-closed', 'closed'), 'store-closed')).toBe(false);
      });

      it('is false for an unbranded error that carries the code', () => {
        const lookAlike = Object.assign(new Error('look-alike'), { code: 'stale-delivery' });
        expect(HarrierError.is(lookAlike, 'stale-delivery')).toBe(false);
      });

      it('narrows the value so its code can be read', () => {
        const caught: unknown = new StaleDeliveryError('d-1');
        const code: HarrierErrorCode | undefined = HarrierError.is(caught) ? caught.code : undefined;
        expect(code).toBe('stale-delivery');
      });
    });

    describe('when the code is a former spelling', () => {
      it.each(Object.entries(HARRIER_ERROR_CODE_ALIASES))(
        'matches %s to an error with its current code %s',
        (alias, code) => {
          const error = new HarrierError(code, 'current spelling');
          expect(HarrierError.is(error, alias as HarrierErrorCodeAlias)).toBe(true);
          expect(HarrierError.is(error, code)).toBe(true);
        },
      );

      it.each(Object.entries(HARRIER_ERROR_CODE_ALIASES))(
        'matches an older copy that threw %s to its current code %s',
        (alias, code) => {
          const older = fromOlderCopy(alias);
          expect(HarrierError.is(older, code)).toBe(true);
          expect(HarrierError.is(older, alias as HarrierErrorCodeAlias)).toBe(true);
        },
      );

      it('does not match a different code', () => {
        const error = new HarrierError('invalid-argument', 'bad argument');
        expect(HarrierError.is(error, 'invalid-options')).toBe(false);
        expect(HarrierError.is(fromOlderCopy('invalid-options'), 'invalid-argument')).toBe(false);
      });
    });

    describe('when the error comes from a second copy of Harrier', () => {
      it('recognises it, with and without a code, although instanceof does not', async () => {
        vi.resetModules();
        const second = await import('../../../src/errors/index.js');
        expect(second.HarrierError).not.toBe(HarrierError);

        const theirs = new second.UnknownTopicError('orders');
        expect(theirs instanceof HarrierError).toBe(false);
        expect(HarrierError.is(theirs)).toBe(true);
        expect(HarrierError.is(theirs, 'unknown-topic')).toBe(true);
        expect(HarrierError.is(theirs, 'stale-delivery')).toBe(false);

        const ours = new HarrierError('invalid-option', 'bad option');
        expect(second.HarrierError.is(ours, 'invalid-options')).toBe(true);
      });
    });
  });

  describe('.code', () => {
    it('is the code given to the constructor, and the name is the class name', () => {
      const error = new UnrecoverableError('give up', { cause: new Error('root') });
      expect(error.code).toBe('unrecoverable');
      expect(error.name).toBe('UnrecoverableError');
      expect(error.cause).toEqual(new Error('root'));
    });
  });
});

describe('HARRIER_ERROR_CODES', () => {
  it('lists each code once, in alphabetical order', () => {
    expect(new Set(HARRIER_ERROR_CODES).size).toBe(HARRIER_ERROR_CODES.length);
    expect([...HARRIER_ERROR_CODES].sort()).toEqual(HARRIER_ERROR_CODES);
  });
});

describe('HARRIER_ERROR_CODE_ALIASES', () => {
  it('maps each former spelling to a current code that is not itself an alias', () => {
    for (const [alias, code] of Object.entries(HARRIER_ERROR_CODE_ALIASES)) {
      expect(HARRIER_ERROR_CODES).toContain(code);
      expect(HARRIER_ERROR_CODES).not.toContain(alias);
    }
  });
});
