/** The `harrier` CLI run in the test's own process, with its output captured. */
import { PassThrough } from 'node:stream';
import type { CliIo } from '../../src/cli/cli-io.js';
import { run } from '../../src/cli/index.js';

/** Options of {@link runCli}. */
export interface RunCliOptions {
  /** The CLI's environment (nothing of the test process's). @defaultValue {} */
  readonly env?: Readonly<Record<string, string>>;
  /** stdout is a terminal: tables instead of JSON lines. @defaultValue false */
  readonly tty?: boolean;
  /** stderr is a terminal: progress bars drawn there. @defaultValue false */
  readonly stderrTty?: boolean;
}

/** What {@link runCli} captured. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `harrier <args>` in this process and returns its exit code and output. */
export async function runCli(args: readonly string[], options: RunCliOptions = {}): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const io: CliIo = {
    stdout: { write: (text: string) => (stdout += text), isTTY: options.tty ?? false },
    stderr: { write: (text: string) => (stderr += text), isTTY: options.stderrTty ?? false },
    stdin: new PassThrough(),
    env: { ...options.env },
  };
  const code = await run(args, io);
  return { code, stdout, stderr };
}
