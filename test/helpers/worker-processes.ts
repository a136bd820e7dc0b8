/**
 * Fixture worker processes for the crash tests: started with tsx, waited on until they print a
 * line or exit, SIGKILLed one by one or all at once after each test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { waitFor } from './local-redis.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** A worker process and the last 20,000 characters it wrote to stdout and stderr. */
export interface Worker {
  readonly child: ChildProcess;
  output(): string;
  /** Resolves once the process has exited. */
  exited(): Promise<void>;
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

/** The fixture processes a test file starts; call `killAll()` in `afterEach`. */
export class WorkerProcesses {
  readonly #running = new Set<ChildProcess>();

  /**
   * @param script - the fixture's absolute path, run with `node --import tsx`
   * @param name - what the wait messages call the worker (`the saga worker`)
   */
  constructor(
    private readonly script: string,
    private readonly name = 'the worker',
  ) {}

  /** Starts `script` with the test's environment plus `env`, without waiting for it. */
  launch(env: Record<string, string>, script = this.script): Worker {
    const child = spawn(process.execPath, ['--import', 'tsx', script], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#running.add(child);
    let output = '';
    const keep = (chunk: Buffer): void => {
      output = (output + chunk.toString()).slice(-20_000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const exit = exitOf(child);
    return { child, output: () => output, exited: () => exit };
  }

  /**
   * Starts the script like {@link WorkerProcesses.launch} and waits until its output holds `until`
   * (its ready line by default); throws with the output when it exits first.
   */
  async start(env: Record<string, string>, until = '"ready":true'): Promise<Worker> {
    const worker = this.launch(env);
    const { child } = worker;
    await waitFor(
      `${this.name} to print ${until}`,
      () => worker.output().includes(until) || child.exitCode !== null,
      { timeoutMs: 30_000, explain: () => worker.output() },
    );
    if (!worker.output().includes(until)) {
      throw new Error(`${this.name} exited before printing ${until}:\n${worker.output()}`);
    }
    return worker;
  }

  /** SIGKILLs `worker` and waits until it has exited. */
  async kill(worker: Worker): Promise<void> {
    worker.child.kill('SIGKILL');
    await worker.exited();
    this.#running.delete(worker.child);
  }

  /** SIGKILLs every process still running and waits until they have exited. */
  async killAll(): Promise<void> {
    for (const child of this.#running) child.kill('SIGKILL');
    await Promise.all([...this.#running].map(exitOf));
    this.#running.clear();
  }
}
