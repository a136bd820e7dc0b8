import { randomInt } from 'node:crypto';

/** Largest seed {@link newSeed} returns, plus one; any safe non-negative integer is accepted as a seed. */
const SEED_LIMIT = 2 ** 31;

/**
 * A source of numbers in [0, 1) wholly determined by its seed (mulberry32).
 *
 * @remarks
 * Not for anything secret: it exists so that a shuffled delivery order can be replayed by passing
 * the same seed again.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** A fresh random seed: a whole number from 1 to 2^31 - 1. */
export function newSeed(): number {
  return randomInt(1, SEED_LIMIT);
}

/** True when `value` can seed {@link seededRandom}: a safe, non-negative whole number. */
export function isSeed(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}
