/**
 * Runs the built `harrier` bin as a child process, for the e2e tests of the CLI on Redis and on
 * PostgreSQL, and reads what it prints.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ErrorInfo } from '../../src/broker/message-broker.js';
import { run, type Run } from './run-command.js';

const root = join(import.meta.dirname, '..', '..');

/** The built `harrier` bin, dist/cli/bin.js. */
export const harrierBin = join(root, 'dist', 'cli', 'bin.js');

/**
 * Throws unless dist/cli/bin.js exists; test/global-setup.ts builds dist/ before any test when it
 * is missing or stale.
 */
export function assertHarrierBuilt(): void {
  if (!existsSync(harrierBin)) throw new Error(`${harrierBin} is missing: run npm run build`);
}

/**
 * Runs `harrier <args>` from the repository root with only PATH, HOME, `USER=tester` and `env` in
 * its environment, stdin not a terminal.
 */
export function harrier(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  return run(process.execPath, [harrierBin, ...args], root, { USER: 'tester', ...env });
}

/** The lines of a `--json` output, each parsed. */
export function jsonLines(text: string): Record<string, unknown>[] {
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** The error of the dead letters the CLI tests list, show and replay. */
export const cliFailure: ErrorInfo = {
  name: 'Error',
  message: 'gateway down',
  stack: 'Error: gateway down\n    at CountHandler.handle (/app/src/count.ts:3:9)',
};
