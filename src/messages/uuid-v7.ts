import { createHash, randomBytes } from 'node:crypto';

let lastMs = -1;
let counter = 0;

/** Random text for 512 ids: 16 hex digits each (64 bits, of which an id keeps 62). */
const POOL_IDS = 512;
let pool = '';
let poolOffset = 0;

/** The text of the last millisecond's time, `xxxxxxxx-xxxx-`: a burst of ids shares its tick. */
let prefixMs = -1;
let prefix = '';

/** `7` and the 12-bit counter, as text, by counter value. */
const COUNTER_TEXT = Array.from({ length: 0x1000 }, (_, c) => (0x7000 | c).toString(16));

/** The variant digit (`8` to `b`) made from a random hex digit, by its char code. */
const VARIANT_DIGIT: string[] = [];
for (let n = 0; n < 16; n++) VARIANT_DIGIT[n.toString(16).charCodeAt(0)] = (0x8 | (n & 0x3)).toString(16);

const MAX_MS = 0xffffffffffff;

/**
 * Returns a new RFC 9562 UUIDv7: 48 bits of Unix milliseconds, then a 12-bit counter that keeps ids
 * made in the same millisecond in order, then 62 random bits.
 *
 * @remarks
 * Time-ordered ids keep Redis keys and log records roughly sorted by creation time. The text is put
 * together from a few pieces (the time's text, remembered for its millisecond; the counter's, from a
 * table; random hex text, made 512 ids at a time) rather than byte by byte.
 * @throws RangeError when `nowMs` is below 0 or above 2^48 - 1, or when every id of that last
 * millisecond is taken.
 */
export function uuidv7(nowMs: number = Date.now()): string {
  const counter = reserveUuidV7(nowMs);
  return uuidV7Text(lastMs, counter);
}

/**
 * Takes the place of a new id now, as {@link uuidv7} would (its millisecond and counter, after every
 * id made before it), and returns its counter; its millisecond is then {@link reservedUuidV7Ms}.
 * {@link uuidV7Text} makes its text later.
 *
 * @remarks
 * For an id made only if something reads it (`execute`): it still carries the time of the call and
 * sorts in call order, whatever ids are made between the call and the read.
 * @throws RangeError when `nowMs` is below 0 or above 2^48 - 1, or when every id of that last
 * millisecond is taken.
 */
export function reserveUuidV7(nowMs: number = Date.now()): number {
  if (nowMs < 0 || nowMs > MAX_MS) {
    throw new RangeError(`uuidv7 needs a time from 0 to ${MAX_MS} ms, got ${nowMs}`);
  }
  // A fraction is dropped and NaN is 0, as the byte writer this replaced did.
  let ms = Math.trunc(nowMs) || 0;
  if (ms <= lastMs) {
    ms = lastMs;
    if (counter < 0xfff) {
      counter++;
    } else if (lastMs < MAX_MS) {
      ms = lastMs + 1;
      counter = 0;
    } else {
      // A 49th bit of time would make a malformed id.
      throw new RangeError(`uuidv7 has no id left: all 4096 of its last millisecond (${MAX_MS}) are taken`);
    }
  } else {
    counter = 0;
  }
  lastMs = ms;
  return counter;
}

/** The millisecond of the id {@link reserveUuidV7} took last. */
export function reservedUuidV7Ms(): number {
  return lastMs;
}

/** The text of the id of millisecond `ms` and counter `counter` (see {@link reserveUuidV7}), with new random bits. */
export function uuidV7Text(ms: number, counter: number): string {
  if (ms !== prefixMs) {
    const time = ms.toString(16).padStart(12, '0');
    prefix = `${time.slice(0, 8)}-${time.slice(8)}-`;
    prefixMs = ms;
  }
  if (poolOffset >= pool.length) {
    pool = randomBytes(8 * POOL_IDS).toString('hex');
    poolOffset = 0;
  }
  const at = poolOffset;
  poolOffset += 16;
  return `${prefix}${COUNTER_TEXT[counter] ?? ''}-${VARIANT_DIGIT[pool.charCodeAt(at)] ?? '8'}${pool.slice(at + 1, at + 4)}-${pool.slice(at + 4, at + 16)}`;
}

/** A lower-case UUIDv7. */
export const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** True when `value` is a lower-case UUIDv7 string. */
export function isUuidV7(value: string): boolean {
  return UUID_V7.test(value);
}

/**
 * A UUIDv7 derived from a seed: the same seed and time always give the same id.
 *
 * @remarks
 * Messages recorded by a handler get ids derived from the handled message's id, the handler and
 * their position, so a redelivered handler that records the same messages records the same ids, and
 * the log and the broker drop them as duplicates.
 */
export function deterministicUuidV7(seed: string, timeMs: number): string {
  const bytes = createHash('sha256').update(seed).digest().subarray(0, 16);
  bytes.writeUIntBE(Math.max(0, Math.min(timeMs, 0xffffffffffff)), 0, 6);
  bytes[6] = 0x70 | ((bytes[6] ?? 0) & 0x0f);
  bytes[8] = 0x80 | ((bytes[8] ?? 0) & 0x3f);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The Unix ms timestamp in a UUIDv7. */
export function uuidV7Time(id: string): number {
  return parseInt(id.replace(/-/g, '').slice(0, 12), 16);
}
