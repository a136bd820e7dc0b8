import { createHash, randomBytes } from 'node:crypto';

let lastMs = -1;
let counter = 0;
const POOL_IDS = 256;
let pool = Buffer.alloc(0);
let poolOffset = 0;

function random16(): Buffer {
  if (poolOffset >= pool.length) {
    pool = randomBytes(16 * POOL_IDS);
    poolOffset = 0;
  }
  const bytes = Buffer.from(pool.subarray(poolOffset, poolOffset + 16));
  poolOffset += 16;
  return bytes;
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
  const bytes = random16();
  bytes.writeUIntBE(ms, 0, 6);
  bytes[6] = 0x70 | ((counter >> 8) & 0x0f);
  bytes[7] = counter & 0xff;
  bytes[8] = 0x80 | ((bytes[8] ?? 0) & 0x3f);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

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
