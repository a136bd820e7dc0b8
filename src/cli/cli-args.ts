import { ExitCode, usageError, type CliIo } from './cli-io.js';

/** Prints a command's help; the exit code of `--help`. */
export function help(io: CliIo, text: string): number {
  io.stdout.write(text);
  return ExitCode.ok;
}

/**
 * `text` as a whole number from 1.
 * @throws CliExit (usage) naming `--option` otherwise.
 */
export function positiveInteger(option: string, text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1) {
    throw usageError(`--${option} "${text}" must be a whole number from 1`);
  }
  return n;
}

/**
 * `text` as a number above 0.
 * @throws CliExit (usage) naming `--option` otherwise.
 */
export function positiveNumber(option: string, text: string): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0) throw usageError(`--${option} "${text}" must be a number above 0`);
  return n;
}
