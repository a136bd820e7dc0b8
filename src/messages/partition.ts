import { HarrierError } from '../errors/harrier-error.js';

const OFFSET_BASIS = 0xcbf29ce484222325n;
const PRIME = 0x100000001b3n;
const MASK = 0xffffffffffffffffn;
const encoder = new TextEncoder();

/** The 64-bit FNV-1a hash of the UTF-8 bytes of `key`. */
export function fnv1a64(key: string): bigint {
  let hash = OFFSET_BASIS;
  for (const byte of encoder.encode(key)) {
    hash ^= BigInt(byte);
    hash = (hash * PRIME) & MASK;
  }
  return hash;
}

/**
 * The partition of a key: `FNV-1a-64(utf8(key)) mod partitions`, the same in every process and
 * every language that implements FNV-1a.
 *
 * @throws HarrierError `invalid-option` when `partitions` is not a whole number from 1 to 1024.
 */
export function partitionOf(key: string, partitions: number): number {
  if (!Number.isInteger(partitions) || partitions < 1 || partitions > 1024) {
    throw new HarrierError(
      'invalid-option',
      `partitions is ${partitions}: use a whole number from 1 to 1024`,
    );
  }
  return Number(fnv1a64(key) % BigInt(partitions));
}
