const brand: unique symbol = Symbol.for('harrier/HarrierError') as never;

/**
 * The base class of every error Harrier throws.
 *
 * @remarks
 * Each error carries a stable string `code` that scripts and handlers can branch on, and a
 * `Symbol.for` brand so {@link HarrierError.is} works even when two copies of Harrier are installed.
 */
export class HarrierError extends Error {
  /** A stable, machine-readable code such as `validation-failed` or `stale-delivery`. */
  readonly code: string;

  /**
   * @param code - stable machine-readable code.
   * @param message - what went wrong and how to fix it.
   * @param options - `cause` of the error, if any.
   */
  constructor(code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
    Object.defineProperty(this, brand, { value: true, enumerable: false });
  }

  /** True when `value` is a HarrierError from any copy of Harrier. */
  static is(value: unknown): value is HarrierError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[brand] === true;
  }
}
