import type { RedisScript } from '../../redis-support.js';

/** One run of a dead-letter script: the script, and its keys and arguments in the order it reads them. */
export interface ScriptCall {
  readonly script: RedisScript;
  readonly keys: readonly string[];
  readonly args: readonly string[];
}

/** A value the scripts may find unset: '' when undefined, else '=' and the value, so '' stays a value. */
export function optionalArg(value: string | number | undefined): string {
  return value === undefined ? '' : `=${value}`;
}
