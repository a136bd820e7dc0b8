import { HarrierError } from '../errors/harrier-error.js';

/**
 * Checks a broker's numeric option (a count or a time in ms).
 *
 * @param broker - the broker class the message names (`PostgresBroker`)
 * @param fix - the rest of the message after "at least N, ": an example value to set
 * @throws HarrierError `invalid-option` unless `value` is a whole number of at least `min`.
 */
export function assertWholeOption(
  broker: string,
  option: string,
  value: number,
  min: number,
  fix: string,
): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new HarrierError(
      'invalid-option',
      `${broker} option ${option} is ${String(value)}: it must be a whole number of at least ${min}, ${fix}`,
    );
  }
}
