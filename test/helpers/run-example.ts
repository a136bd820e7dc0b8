/**
 * Runs an example program as a user would (`npx tsx <file>` from the repository root) and returns
 * how it ended.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));

/** How a program ended: its exit code (-1 for a timeout or a signal) and its output. */
export interface Outcome {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `npx tsx <file> [args]` with `env` added to this process's; killed with SIGKILL after
 * `timeoutMs`.
 */
export async function runExample(
  file: string,
  options: {
    readonly env?: Record<string, string>;
    readonly timeoutMs?: number;
    readonly args?: readonly string[];
  } = {},
): Promise<Outcome> {
  try {
    const { stdout, stderr } = await run('npx', ['tsx', file, ...(options.args ?? [])], {
      cwd: root,
      env: { ...process.env, ...options.env },
      timeout: options.timeoutMs ?? 20_000,
      killSignal: 'SIGKILL',
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: string; stderr?: string };
    return {
      code: typeof failed.code === 'number' ? failed.code : -1,
      stdout: failed.stdout ?? '',
      stderr: failed.stderr ?? '',
    };
  }
}
