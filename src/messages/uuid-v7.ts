import { createHash, randomBytes } from 'node:crypto';

let lastMs = -1;
let counter = 0;
const POOL_IDS = 256;
let pool = Buffer.alloc(0);
let poolOffset = 0;

/** The next 16 random bytes of the pool, written over in place (each slot is used once). */
function random16(): number {
  if (poolOffset >= pool.length) {
    pool = randomBytes(16 * POOL_IDS);
    poolOffset = 0;
  }
  const at = poolOffset;
  poolOffset += 16;
  return at;
}

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/** The 16 bytes from `at` as a UUID text: a table lookup per byte, no Buffer copy or hex slices. */
function uuidText(bytes: Buffer, at: number): string {
  let text = '';
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) text += '-';
    text += HEX[bytes[at + i] ?? 0] ?? '00';
  }
  return text;
}

/**
 * Returns a new RFC 9562 UUIDv7: 48 bits of Unix milliseconds, then a 12-bit counter that keeps ids
 * made in the same millisecond in order, then 62 random bits.
 *
 * @remarks
 * Time-ordered ids keep Redis keys and log records roughly sorted by creation time.
 */
export function uuidv7(nowMs: number = Date.now()): string {
  let ms = nowMs;
  if (ms <= lastMs) {
    ms = lastMs;
    counter++;
    if (counter > 0xfff) {
      ms = lastMs + 1;
      counter = 0;
    }
  } else {
    counter = 0;
  }
  lastMs = ms;
  const at = random16();
  const bytes = pool;
  bytes.writeUIntBE(ms, at, 6);
  bytes[at + 6] = 0x70 | ((counter >> 8) & 0x0f);
  bytes[at + 7] = counter & 0xff;
  bytes[at + 8] = 0x80 | ((bytes[at + 8] ?? 0) & 0x3f);
  return uuidText(bytes, at);
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
