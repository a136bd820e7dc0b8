/**
 * Runs the built `harrier` bin as a child process, for the e2e tests of the CLI on Redis and on
 * PostgreSQL, and reads what it prints.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ErrorInfo } from '../../src/broker/message-broker.js';
import { buildDeadLetterRecord } from '../../src/dead-letters/dead-letter-record.js';
import type { DeadLetterReason, DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
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

/** How {@link countDeadLetter} varies its dead letter. */
export interface CountDeadLetterOptions {
  /**
   * Turns the envelope into the stored body (a test of a malformed body changes it).
   * @defaultValue JSON.stringify
   */
  readonly encode?: (envelope: object) => string;
  /** @defaultValue 'handler-failed' */
  readonly reason?: DeadLetterReason;
  /**
   * Records a first failed attempt a second ago in the history.
   * @defaultValue true
   */
  readonly retried?: boolean;
}

/**
 * A dead letter of a `cli.Count` command with `payload` in endpoint `counter`, failed by
 * `CountHandler` with {@link cliFailure} on its third attempt.
 */
export function countDeadLetter(payload: object, options: CountDeadLetterOptions = {}): DeadLetterRecord {
  const id = uuidv7();
  const body = (options.encode ?? JSON.stringify)({
    v: 1,
    id,
    kind: 'command',
    type: 'cli.Count',
    payload,
    meta: { correlationId: id, occurredAt: new Date().toISOString(), headers: {} },
  });
  return buildDeadLetterRecord({
    body,
    facts: {
      messageId: id,
      kind: 'command',
      type: 'cli.Count',
      endpoint: 'counter',
      handler: 'CountHandler',
      attempt: 3,
      history: options.retried === false ? [] : [{ attempt: 1, at: Date.now() - 1000, error: cliFailure }],
      partitionKey: undefined,
    },
    handler: 'CountHandler',
    reason: options.reason ?? 'handler-failed',
    error: cliFailure,
    ordered: false,
    now: Date.now(),
  });
}
