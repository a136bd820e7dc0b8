import {
  canonicalErrorCode,
  type HarrierErrorCode,
  type HarrierErrorCodeAlias,
} from './harrier-error-code.js';

const brand: unique symbol = Symbol.for('harrier/HarrierError') as never;

/**
 * The base class of every error Harrier throws.
 *
 * @remarks
 * Each error carries a stable `code` from a closed set ({@link HarrierErrorCode}, listed in
 * docs/errors.md) that scripts and handlers can branch on, and a `Symbol.for` brand so
 * {@link HarrierError.is} works even when two copies of Harrier are installed.
 */
export class HarrierError extends Error {
  /** A stable, machine-readable code such as `validation-failed` or `stale-delivery`. */
  readonly code: HarrierErrorCode;

  /**
   * @param code - stable machine-readable code.
   * @param message - what went wrong and how to fix it.
   * @param options - `cause` of the error, if any.
   */
  constructor(code: HarrierErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
    Object.defineProperty(this, brand, { value: true, enumerable: false });
  }

  /**
   * True when `value` is a HarrierError from any copy of Harrier and, when `code` is given, carries
   * that code.
   *
   * @remarks
   * Prefer this to `instanceof` (which fails across two installed copies) and to comparing `code`
   * (a former spelling such as `invalid-options` still matches its current code `invalid-option`,
   * both ways; see `HARRIER_ERROR_CODE_ALIASES`).
   *
   * @example
   * ```ts
   * try {
   *   await broker.ack(delivery.id);
   * } catch (error) {
   *   if (!HarrierError.is(error, 'stale-delivery')) throw error;
   * }
   * ```
   */
  static is(value: unknown, code?: HarrierErrorCode | HarrierErrorCodeAlias): value is HarrierError {
    if (typeof value !== 'object' || value === null || (value as Record<symbol, unknown>)[brand] !== true) {
      return false;
    }
    if (code === undefined) return true;
    const actual = (value as { code?: unknown }).code;
    return typeof actual === 'string' && canonicalErrorCode(actual) === canonicalErrorCode(code);
  }
}
