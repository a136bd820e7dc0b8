/**
 * Runs a command as a child process, the way the e2e tests on an installed or linked package run
 * npm, tsc and node in a temp app: a clean environment (PATH and HOME, plus what the test adds), the
 * output collected.
 */
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';

/** How a command ended: its exit code (`null` when a signal ended it) and its output. */
export interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `command` in `cwd` with only PATH, HOME and `env` in its environment. */
export function run(
  command: string,
  args: readonly string[],
  cwd: string,
  env: Record<string, string> = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? tmpdir(), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => {
      resolve({ code, stdout, stderr });
    });
  });
}

/** Runs like {@link run}, and throws with the output unless the command exits 0. */
export async function ok(
  command: string,
  args: readonly string[],
  cwd: string,
  env: Record<string, string> = {},
): Promise<Run> {
  const result = await run(command, args, cwd, env);
  if (result.code !== 0) {
    throw new Error(
      `${command} ${args.join(' ')} exited ${String(result.code)}\n${result.stdout}\n${result.stderr}`,
    );
  }
  return result;
}
