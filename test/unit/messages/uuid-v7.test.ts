import { beforeEach, describe, expect, it, vi } from 'vitest';
import type * as UuidV7Module from '../../../src/messages/uuid-v7.js';

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Milliseconds encoded in the first 48 bits of a UUIDv7. */
const timestampOf = (id: string): number => Number.parseInt(id.replaceAll('-', '').slice(0, 12), 16);

let uuid: typeof UuidV7Module;

// The generator keeps the last time and counter in module state: each test gets a fresh module.
beforeEach(async () => {
  vi.resetModules();
  uuid = await import('../../../src/messages/uuid-v7.js');
});

describe('uuidv7', () => {
  describe('when called', () => {
    it('returns a lower-case RFC 9562 UUID with version 7 and variant 10', () => {
      const id = uuid.uuidv7();

      expect(id).toMatch(UUID_V7);
      expect(id[14]).toBe('7');
      expect(['8', '9', 'a', 'b']).toContain(id[19]);
      expect(uuid.isUuidV7(id)).toBe(true);
    });

    it('stays valid and unique across refills of its random pool', () => {
      // The pool holds 512 ids' random text: 2,000 ids go through it four times.
      const ids = Array.from({ length: 2_000 }, () => uuid.uuidv7(1_700_000_000_000));

      expect(ids.every((id) => UUID_V7.test(id))).toBe(true);
      expect(new Set(ids).size).toBe(ids.length);
      expect([...ids].sort()).toEqual(ids);
    });

    it('uses all four variant digits and random text in its last 62 bits', () => {
      const ids = Array.from({ length: 400 }, () => uuid.uuidv7(1_700_000_000_000));

      expect(new Set(ids.map((id) => id[19]))).toEqual(new Set(['8', '9', 'a', 'b']));
      expect(new Set(ids.map((id) => id.slice(20))).size).toBe(ids.length);
    });

    it('encodes the given time in its first 48 bits', () => {
      const now = Date.UTC(2026, 4, 17, 12, 30, 45, 123);

      expect(timestampOf(uuid.uuidv7(now))).toBe(now);
    });
  });

  describe('when 10,000 ids are made in the same millisecond', () => {
    it('returns unique ids in strictly increasing order', () => {
      const now = Date.UTC(2026, 0, 1);
      const ids = Array.from({ length: 10_000 }, () => uuid.uuidv7(now));

      const firstOutOfOrder = ids.findIndex((id, i) => i > 0 && id <= ids[i - 1]!);
      expect(firstOutOfOrder).toBe(-1);
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.every((id) => UUID_V7.test(id))).toBe(true);
      expect(timestampOf(ids[0]!)).toBe(now);
    });
  });

  describe('when the time is out of the 48 bits', () => {
    it('throws a RangeError', () => {
      expect(() => uuid.uuidv7(-1)).toThrow(RangeError);
      expect(() => uuid.uuidv7(2 ** 48)).toThrow(RangeError);
    });
  });

  describe('when every id of the last millisecond of the 48 bits is taken', () => {
    it('throws a RangeError on every later call instead of making an id with a 49-bit time', () => {
      const last = 2 ** 48 - 1;
      const ids = Array.from({ length: 4096 }, () => uuid.uuidv7(last));
      expect(ids.every((id) => UUID_V7.test(id) && timestampOf(id) === last)).toBe(true);
      expect(() => uuid.uuidv7(last)).toThrow(RangeError);
      expect(() => uuid.uuidv7(last)).toThrow(RangeError);
    });
  });

  describe('when the time has a fraction of a millisecond', () => {
    it('encodes the whole milliseconds', () => {
      expect(timestampOf(uuid.uuidv7(1_700_000_000_000.7))).toBe(1_700_000_000_000);
    });
  });

  describe('when the clock goes backwards', () => {
    it('still returns an id that sorts after the previous one', () => {
      const first = uuid.uuidv7(Date.UTC(2026, 0, 1, 0, 0, 1));
      const second = uuid.uuidv7(Date.UTC(2026, 0, 1));

      expect(second > first).toBe(true);
    });
  });
});

describe('isUuidV7', () => {
  describe('when given something other than a lower-case UUIDv7', () => {
    it.each([
      ['a UUIDv4', '3b241101-e2bb-4255-8caf-4136c566a962'],
      ['an upper-case UUIDv7', '0190B8E2-7C1A-7ABC-8DEF-0123456789AB'],
      ['a wrong variant', '0190b8e2-7c1a-7abc-cdef-0123456789ab'],
      ['a truncated id', '0190b8e2-7c1a-7abc-8def-0123456789a'],
      ['an empty string', ''],
    ])('returns false for %s', (_case, value) => {
      expect(uuid.isUuidV7(value)).toBe(false);
    });
  });
});

describe('reserveUuidV7', () => {
  describe('when an id is made between the reservation and its text', () => {
    it('keeps the reserved time and sorts before the id made after it', () => {
      const calledAt = Date.UTC(2026, 0, 1, 0, 0, 1);
      const counter = uuid.reserveUuidV7(calledAt);
      const ms = uuid.reservedUuidV7Ms();
      const between = uuid.uuidv7(calledAt + 5_000);
      const reserved = uuid.uuidV7Text(ms, counter);

      expect(reserved).toMatch(UUID_V7);
      expect(timestampOf(reserved)).toBe(calledAt);
      expect(reserved < between).toBe(true);
    });
  });
});
