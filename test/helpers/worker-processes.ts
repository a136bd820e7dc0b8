/**
 * Fixture worker processes for the crash tests: started with tsx, waited on until they print a
 * line, SIGKILLed one by one or all at once after each test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { waitFor } from './local-redis.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** A running worker process and the last 16,000 characters it wrote to stdout and stderr. */
export interface Worker {
  readonly child: ChildProcess;
  output(): string;
}

/** Resolves when `child` has exited (at once when it already has). */
export function exitOf(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) =>
    child.once('exit', () => {
      resolve();
    }),
  );
}

/** The processes of one fixture script started by a test file; call `killAll()` in `afterEach`. */
export class WorkerProcesses {
  readonly #running = new Set<ChildProcess>();

  /**
   * @param script - the fixture's absolute path, run with `node --import tsx`
   * @param name - what the wait messages call the worker (`the saga worker`)
   */
  constructor(
    private readonly script: string,
    private readonly name: string,
  ) {}

  /**
   * Starts the script with the test's environment plus `env`, and waits until its output holds
   * `until` (its ready line by default); throws with the output when it exits first.
   */
  async start(env: Record<string, string>, until = '"ready":true'): Promise<Worker> {
    const child = spawn(process.execPath, ['--import', 'tsx', this.script], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#running.add(child);
    let output = '';
    const keep = (chunk: Buffer): void => {
      output = (output + chunk.toString()).slice(-16_000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    await waitFor(`${this.name} to print ${until}`, () => output.includes(until) || child.exitCode !== null, {
      timeoutMs: 30_000,
      explain: () => output,
    });
    if (!output.includes(until)) throw new Error(`${this.name} exited before printing ${until}:\n${output}`);
    return { child, output: () => output };
  }

  /** SIGKILLs `worker` and waits until it has exited. */
  async kill(worker: Worker): Promise<void> {
    worker.child.kill('SIGKILL');
    await exitOf(worker.child);
    this.#running.delete(worker.child);
  }

  /** SIGKILLs every worker still running and waits until they have exited. */
  async killAll(): Promise<void> {
    for (const child of this.#running) child.kill('SIGKILL');
    await Promise.all([...this.#running].map(exitOf));
    this.#running.clear();
  }
}
