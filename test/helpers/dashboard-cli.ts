import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

/** The built `harrier` command (`npm run build`; the global setup builds it). */
export const DASHBOARD_BIN = join(import.meta.dirname, '..', '..', 'dist', 'cli', 'bin.js');

/** A `harrier` child process: its first line of stdout, its exit code and what it wrote to stderr. */
export interface StartedCli {
  readonly child: ChildProcess;
  readonly firstLine: Promise<string>;
  readonly exit: Promise<number | null>;
  stderr(): string;
}

/** Starts the built `harrier` with `args` and only PATH plus `env` in its environment. */
export function startDashboardCli(args: string[], env: Record<string, string> = {}): StartedCli {
  const child = spawn(process.execPath, [DASHBOARD_BIN, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const firstLine = new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const newline = out.indexOf('\n');
      if (newline >= 0) resolve(out.slice(0, newline));
    });
    child.once('exit', () => {
      reject(new Error(`exited before printing: ${err}`));
    });
  });
  firstLine.catch(() => undefined);
  const exit = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => {
      resolve(code);
    });
  });
  return { child, firstLine, exit, stderr: () => err };
}
