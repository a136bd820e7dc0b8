/**
 * A poison message on Redis (DESIGN.md guarantee 12): its handler ends the worker process with
 * `process.exit(1)`, and the test restarts a worker each time one dies, as a process manager would.
 * Workers are fixtures/redis-worker.ts processes with small lock timings, one message at a time
 * each (so a dying worker holds the poison message only), and 8 attempts: the dead letter after 3
 * crashes comes from the crash limit, not from the retry policy.
 */
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { silentLogger } from '../../src/index.js';
import { prepareMessage, type OutgoingMessage } from '../../src/extend.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';
import {
  readWorkLines,
  startWorker,
  stopAllWorkers,
  tempDir,
  waitFor,
  type WorkerProcess,
  type WorkerSettings,
} from './fixtures/fault-harness.js';
import { DoWork, HANDLER_OF, WorkRequested, type WorkLine } from './fixtures/fault-messages.js';

const redisUrl = inject('redisUrl');

/** Worker processes kept running: one more is started whenever one exits, until `stop()`. */
class Supervisor {
  readonly #settings: Omit<WorkerSettings, 'outFile'>;
  readonly #dir: string;
  readonly #failures: unknown[] = [];
  readonly #workers: WorkerProcess[] = [];
  #started = 0;
  #stopped = false;

  constructor(settings: Omit<WorkerSettings, 'outFile'>, dir: string) {
    this.#settings = settings;
    this.#dir = dir;
  }

  /** Every line the workers wrote so far. */
  lines(): WorkLine[] {
    return Array.from({ length: this.#started }, (_, n) => readWorkLines(this.#file(n))).flat();
  }

  /** What went wrong starting workers, and the output of each worker started. */
  explain(): string {
    const failures = this.#failures.map((error) => `start failed: ${String(error)}`);
    const outputs = this.#workers.map((worker) => `worker ${worker.pid}:\n${worker.output()}`);
    return [...failures, ...outputs].join('\n');
  }

  /** Starts a worker, and another one whenever it exits (before it was ready, too). */
  async launch(): Promise<void> {
    const outFile = this.#file(this.#started++);
    let worker: WorkerProcess;
    try {
      worker = await startWorker({ ...this.#settings, outFile });
    } catch (error) {
      // It may take the poison message before it says it is ready.
      if (!this.#stopped) this.#relaunch(error);
      return;
    }
    this.#workers.push(worker);
    const replace = (): void => {
      if (!this.#stopped) this.#relaunch(undefined);
    };
    if (worker.running) worker.child.once('exit', replace);
    else replace();
  }

  stop(): void {
    this.#stopped = true;
  }

  #relaunch(failure: unknown): void {
    const message = failure instanceof Error ? failure.message : '';
    if (failure !== undefined && !message.includes('exited before it was ready')) {
      this.#failures.push(failure);
    }
    this.launch().catch((error: unknown) => this.#failures.push(error));
  }

  #file(n: number): string {
    return join(this.#dir, `worker-${n}.jsonl`);
  }
}

describe('BullMqBroker', () => {
  let dir: string;
  let prefix: string;

  beforeEach(() => {
    dir = tempDir();
    prefix = `{crash-${randomUUID().slice(0, 8)}}`;
  });

  afterEach(async () => {
    await stopAllWorkers();
    const client = new Redis(redisUrl);
    await deleteKeys(client, prefix);
    client.disconnect();
    rmSync(dir, { recursive: true, force: true });
  });

  describe('crash limit', () => {
    describe('when one message makes every worker that takes it exit, and workers are restarted', () => {
      it('dead-letters it as worker-crashed after 3 crashes, and handles every other message once', async () => {
        const supervisor = new Supervisor(
          {
            redisUrl,
            prefix,
            concurrency: 1,
            retryAttempts: 8,
            lock: { lockDurationMs: 2_000, lockRenewMs: 500, stalledIntervalMs: 500 },
          },
          dir,
        );
        await Promise.all([supervisor.launch(), supervisor.launch()]);
        const now = Date.now();
        const others: OutgoingMessage[] = Array.from(
          { length: 20 },
          (_, n) => prepareMessage(n % 2 === 0 ? DoWork : WorkRequested, { n }, {}, { now }).outgoing,
        );
        const poison = prepareMessage(DoWork, { n: 100, exitProcess: true }, {}, { now }).outgoing;
        const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
        const deadLetters = new RedisDeadLetterStore({ connection: redisUrl, prefix });
        try {
          await broker.publishBatch(others.slice(0, 10));
          await broker.publish(poison);
          await broker.publishBatch(others.slice(10));

          const handled = (): WorkLine[] => supervisor.lines().filter((line) => line.outcome === 'handled');
          await waitFor(
            'the poison message dead-lettered and every other message handled',
            async () => (await deadLetters.count()) > 0 && handled().length >= others.length,
            {
              timeoutMs: 90_000,
              explain: async () =>
                `${await deadLetters.count()} dead letters, ${handled().length} handled; lines:\n${supervisor
                  .lines()
                  .map((line) => JSON.stringify(line))
                  .join('\n')}\n${supervisor.explain()}`,
            },
          );
          supervisor.stop();

          const { records } = await deadLetters.list();
          expect(records).toHaveLength(1);
          expect(records[0]).toMatchObject({
            messageId: poison.id,
            handler: HANDLER_OF.command,
            reason: 'worker-crashed',
            attemptCount: 4,
            error: { code: 'worker-crashed' },
          });
          const crashes = supervisor
            .lines()
            .filter((line) => line.outcome === 'exiting')
            .map((line) => [line.messageId, line.attempt])
            .sort((a, b) => Number(a[1]) - Number(b[1]));
          expect(crashes, 'three workers ended by the poison message, one per attempt').toEqual([
            [poison.id, 1],
            [poison.id, 2],
            [poison.id, 3],
          ]);
          expect(
            handled()
              .map((line) => line.messageId)
              .sort(),
            'every other message handled exactly once',
          ).toEqual(others.map((message) => message.id).sort());
        } finally {
          supervisor.stop();
          await broker.close();
          await deadLetters.close();
        }
      }, 120_000);
    });
  });
});
