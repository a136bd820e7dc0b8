/** Wrong tokens a client address may present in a burst, and per second after it. */
export const TOKEN_GUESSES_PER_SECOND = 5;

/** Addresses kept before the first sweep of those that are back to a full allowance. */
const FIRST_SWEEP_AT = 1024;

interface Allowance {
  /** Wrong tries left, fractional while it refills. */
  tries: number;
  /** When `tries` was last computed, in ms. */
  at: number;
}

/**
 * How many wrong tokens each client address may still present: a token bucket of
 * {@link TOKEN_GUESSES_PER_SECOND} tries that refills at that many a second.
 *
 * @remarks
 * A token of 16 characters or more cannot be guessed at this rate; the limit keeps a weak token
 * (or a brute force against a strong one) from being tried as fast as the server answers. Only wrong
 * tokens spend tries, so a visitor without a token is never slowed. Addresses back to a full
 * allowance are forgotten in sweeps whose threshold doubles with the addresses kept, so memory stays
 * bounded by the addresses seen in about a second, at a constant cost per wrong try.
 */
export class TokenGuessLimit {
  readonly #perSecond: number;
  readonly #allowances = new Map<string, Allowance>();
  #sweepAt = FIRST_SWEEP_AT;

  constructor(perSecond: number = TOKEN_GUESSES_PER_SECOND) {
    this.#perSecond = perSecond;
  }

  /** Ms until `address` may try again, 0 when it may now. */
  waitMs(address: string, nowMs: number): number {
    const allowance = this.#allowances.get(address);
    if (allowance === undefined) return 0;
    const tries = this.#refilled(allowance, nowMs);
    return tries >= 1 ? 0 : Math.ceil(((1 - tries) * 1000) / this.#perSecond);
  }

  /** Spends one try of `address` on a wrong token. */
  wrong(address: string, nowMs: number): void {
    const allowance = this.#allowances.get(address);
    const tries = allowance === undefined ? this.#perSecond : this.#refilled(allowance, nowMs);
    this.#allowances.set(address, { tries: Math.max(0, tries - 1), at: nowMs });
    if (this.#allowances.size >= this.#sweepAt) {
      for (const [key, kept] of this.#allowances) {
        if (this.#refilled(kept, nowMs) >= this.#perSecond) this.#allowances.delete(key);
      }
      this.#sweepAt = Math.max(FIRST_SWEEP_AT, 2 * this.#allowances.size);
    }
  }

  #refilled(allowance: Allowance, nowMs: number): number {
    // A clock that went back refills nothing rather than spending tries.
    const elapsed = Math.max(0, nowMs - allowance.at);
    return Math.min(this.#perSecond, allowance.tries + (elapsed * this.#perSecond) / 1000);
  }
}
