/**
 * The command types a publisher has found registered, trusted while the routes version they were
 * read at is the current one, and taken on trust for at most `maxAgeMs` after it was last read.
 *
 * @remarks
 * A command publish reads nothing for a type it knows, which keeps the send path at one round
 * trip. Routes can be removed (an endpoint registered again without the type), so knowing a type
 * for ever would keep accepting commands nobody consumes: once `maxAgeMs` has passed since the
 * version was last confirmed (by any publish, events included), the next command publish reads it
 * again, and a changed version forgets every type. A type not found is never kept: its endpoint
 * may register at any time.
 */
export class CommandRouteCache {
  readonly #maxAgeMs: number;
  readonly #types = new Set<string>();
  /** The routes version the types were read at; undefined before the first read. */
  #version: string | null | undefined;
  /** When the version was last confirmed, in the caller's clock; never yet: -Infinity. */
  #confirmedAt = -Infinity;

  /** @param maxAgeMs - how long a confirmed version is trusted without reading it again. */
  constructor(maxAgeMs: number) {
    this.#maxAgeMs = maxAgeMs;
  }

  /** Whether `type` was found registered at the current version (however old that knowledge is). */
  knows(type: string): boolean {
    return this.#types.has(type);
  }

  /** Whether the version was confirmed less than `maxAgeMs` before `now`. */
  isFresh(now: number): boolean {
    return now - this.#confirmedAt < this.#maxAgeMs;
  }

  /**
   * Files the routes version read at `now`: a different one than the types were read at forgets
   * them all. Returns true when it did.
   */
  confirm(version: string | null, now: number): boolean {
    this.#confirmedAt = now;
    if (version === this.#version) return false;
    this.#version = version;
    this.#types.clear();
    return true;
  }

  /** Adds types found registered, read after the version last confirmed. */
  learn(types: Iterable<string>): void {
    for (const type of types) this.#types.add(type);
  }
}
