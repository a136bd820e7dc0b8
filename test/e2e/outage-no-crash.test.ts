/**
 * No dependency's connection loss crashes a process (DESIGN.md guarantee 11): a worker whose
 * handlers run in postgresUnitOfWork, an outbox relay and a PostgreSQL projection, each a child
 * process, go through PostgreSQL ending every session, PostgreSQL restarts and Redis restarts while
 * messages flow. Each child records what would have ended it (an uncaught exception, an unhandled
 * rejection) instead of dying; the test wants none, every process alive, and every message sent
 * handled or dead-lettered. The test starts its own PostgreSQL and redis-server, since it stops them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createBus, silentLogger, uuidv7, type MessageBus } from '../../src/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { startPostgresServer, type LocalPostgres } from '../helpers/local-postgres.js';
import { freshPrefix } from '../helpers/redis.js';
import { RedisServer, tempDir, waitFor } from './fixtures/fault-harness.js';
import { readCrashes, type CrashLine } from './fixtures/fixture-process.js';
import { DoWork, PARTITIONS, WorkDone } from './fixtures/outage-messages.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const OUTPUT_TAIL_CHARS = 20_000;

/** A child process running one of the outage fixtures. */
interface Child {
  readonly name: string;
  readonly child: ChildProcess;
  readonly crashFile: string;
  output(): string;
  readonly running: boolean;
  exited(): Promise<void>;
}

const children: Child[] = [];
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const c of children) if (c.running) c.child.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited()));
  children.length = 0;
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Starts `node --import tsx <fixture>` and waits until it prints that it is ready. */
async function startChild(name: string, env: Record<string, string>): Promise<Child> {
  const crashFile = join(env.OUT_DIR ?? '', `${name}.crashes`);
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL(`./fixtures/${name}.ts`, import.meta.url))],
    { cwd: ROOT, env: { ...process.env, ...env, CRASH_FILE: crashFile }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-OUTPUT_TAIL_CHARS);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exit = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else
      child.once('exit', () => {
        resolve();
      });
  });
  const handle: Child = {
    name,
    child,
    crashFile,
    output: () => output,
    get running() {
      return child.exitCode === null && child.signalCode === null;
    },
    exited: () => exit,
  };
  children.push(handle);
  await waitFor(`${name} to be ready`, () => output.includes('"ready":true') || !handle.running, {
    timeoutMs: 30_000,
    explain: () => output,
  });
  if (!handle.running) throw new Error(`${name} exited before it was ready:\n${output}`);
  return handle;
}

/** What a child recorded instead of crashing. */
function crashes(child: Child): CrashLine[] {
  return readCrashes(child.crashFile);
}

describe('Outages of PostgreSQL and Redis', () => {
  describe('while a worker (inbox and outbox), an outbox relay and a PostgreSQL projection run', () => {
    it('crash no process and lose no message: 20 x every session ended, 5 PostgreSQL restarts, 3 Redis restarts', async () => {
      const startedAt = Date.now();
      const postgres: LocalPostgres = await startPostgresServer('harrier-outage-pg-');
      cleanups.push(() => {
        postgres.stop();
      });
      const redis = await RedisServer.start({ appendOnly: true });
      cleanups.push(() => redis.destroy());
      const outDir = tempDir();
      cleanups.push(() => {
        rmSync(outDir, { recursive: true, force: true });
      });
      const prefix = freshPrefix();

      // One connection: "every backend but its own" ends every other session there is.
      const pool = new pg.Pool({ connectionString: postgres.url, max: 1 });
      pool.on('error', () => {});
      cleanups.push(() => pool.end());
      /** Runs `sql`, again until it succeeds: the server may just have come back. */
      const query = async <R extends pg.QueryResultRow>(sql: string): Promise<R[]> => {
        let rows: R[] = [];
        await waitFor(
          `PostgreSQL to answer ${sql}`,
          async () => {
            try {
              rows = (await pool.query<R>(sql)).rows;
              return true;
            } catch {
              return false;
            }
          },
          { timeoutMs: 30_000 },
        );
        return rows;
      };
      await migratePostgres(postgres.url);
      await query('CREATE TABLE work (n integer PRIMARY KEY)');
      await query('CREATE TABLE projected (n integer PRIMARY KEY)');
      const numbers = async (table: 'work' | 'projected'): Promise<Set<number>> =>
        new Set((await query<{ n: number }>(`SELECT n FROM ${table}`)).map((row) => row.n));

      const env = { DATABASE_URL: postgres.url, REDIS_URL: redis.url, PREFIX: prefix, OUT_DIR: outDir };
      const worker = await startChild('outage-worker', { ...env, HANDLE_MS: '30' });
      const relay = await startChild('outage-relay', env);
      const projection = await startChild('outage-projection', { ...env, COMMIT_MS: '100' });
      const processes = [worker, relay, projection];

      const producer: MessageBus = createBus({
        endpoint: 'producer',
        broker: new BullMqBroker({
          connection: redis.url,
          prefix,
          partitions: PARTITIONS,
          logger: silentLogger,
        }),
        logger: silentLogger,
      });
      cleanups.push(() => producer.stop({ gracePeriodMs: 200 }));
      const sent: number[] = [];
      /** Sends DoWork n, again with the same id until Redis takes it (it may be restarting). */
      const send = async (n: number): Promise<void> => {
        const id = uuidv7();
        await waitFor(
          `DoWork ${n} to be sent`,
          async () => {
            try {
              await producer.send(DoWork, { n }, { id });
              return true;
            } catch {
              return false;
            }
          },
          { timeoutMs: 30_000 },
        );
        sent.push(n);
      };

      const faults = { terminated: 0, postgresRestarts: 0, redisRestarts: 0 };
      const BATCH = 8;
      for (let round = 0; round < 20; round++) {
        const handledBefore = (await numbers('work')).size;
        for (let i = 0; i < BATCH; i++) await send(sent.length);
        // Some handled, the rest in flight (most of them idle in their transactions) or queued.
        await waitFor(
          'the worker to handle some of the batch',
          async () => (await numbers('work')).size > handledBefore,
          {
            timeoutMs: 60_000,
            explain: () => worker.output(),
          },
        );
        const [ended] = await query<{ n: number }>(
          `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
            WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'`,
        );
        faults.terminated += ended?.n ?? 0;
        if (round % 4 === 3) {
          postgres.halt();
          postgres.start();
          faults.postgresRestarts++;
        }
        if (round % 6 === 5) {
          await redis.kill('SIGKILL');
          await redis.restart();
          faults.redisRestarts++;
        }
      }
      expect(faults).toMatchObject({ postgresRestarts: 5, redisRestarts: 3 });

      // Every command sent is handled or dead-lettered, and every handled one projected or dead-lettered.
      const deadLetters = new RedisDeadLetterStore({ connection: redis.url, prefix });
      cleanups.push(() => deadLetters.close());
      const deadOf = async (type: string): Promise<Set<number>> => {
        const found = new Set<number>();
        let cursor: string | undefined;
        do {
          const page = await deadLetters.list({ type }, { limit: 200, ...(cursor ? { cursor } : {}) });
          for (const record of page.records) {
            found.add((JSON.parse(record.envelope) as { payload: { n: number } }).payload.n);
          }
          cursor = page.next;
        } while (cursor !== undefined);
        return found;
      };
      const missing = async (): Promise<{ commands: number[]; events: number[] }> => {
        const handled = await numbers('work');
        const deadCommands = await deadOf(DoWork.type);
        const projected = await numbers('projected');
        const deadEvents = await deadOf(WorkDone.type);
        return {
          commands: sent.filter((n) => !handled.has(n) && !deadCommands.has(n)),
          events: [...handled].filter((n) => !projected.has(n) && !deadEvents.has(n)),
        };
      };
      let left = await missing();
      await waitFor(
        'every message handled or dead-lettered',
        async () => {
          left = await missing();
          return left.commands.length === 0 && left.events.length === 0;
        },
        {
          timeoutMs: 60_000,
          explain: () =>
            `missing ${JSON.stringify(left)}\n${processes.map((p) => `${p.name}: ${p.output()}`).join('\n')}`,
        },
      );
      expect(await query('SELECT 1 FROM harrier.outbox')).toEqual([]);

      const counts = Object.fromEntries(
        processes.map((p) => {
          const lines = crashes(p);
          const count = (event: CrashLine['event']) => lines.filter((line) => line.event === event).length;
          return [p.name, { uncaught: count('uncaughtException'), unhandled: count('unhandledRejection') }];
        }),
      );
      const none = { uncaught: 0, unhandled: 0 };
      expect(
        counts,
        processes.map((p) => `${p.name}:\n${p.output()}\n${JSON.stringify(crashes(p))}`).join('\n'),
      ).toEqual(Object.fromEntries(processes.map((p) => [p.name, none])));
      for (const p of processes) expect(p.running, `${p.name} is still running:\n${p.output()}`).toBe(true);
      const handled = (await numbers('work')).size;
      console.info(
        JSON.stringify({
          sent: sent.length,
          handled,
          deadCommands: (await deadOf(DoWork.type)).size,
          deadEvents: (await deadOf(WorkDone.type)).size,
          ...faults,
          seconds: Math.round((Date.now() - startedAt) / 1000),
        }),
      );
    }, 180_000);
  });
});
