/**
 * Outages pause, they do not dead-letter: an app process (fixtures/outage-pause-app.ts) runs inbox handlers
 * in PostgreSQL, an outbox relay and a PostgreSQL projection while one of its dependencies is stopped
 * for 60 s with messages flowing: its PostgreSQL in one test, its dead-letter store's Redis in the
 * other. Each test starts its own PostgreSQL and both Redis servers, since it stops one of them.
 *
 * Beside them, PostgresBroker through a 60 s PostgreSQL outage (fixtures/pg-broker-outage.ts): the
 * server the broker, the inbox and the handlers' effects live in is stopped for 60 s while the test
 * keeps publishing. The worker pauses and resumes by itself, no process crashes, the outage
 * dead-letters nothing and spends no attempt (the deliveries it held are given back once the server
 * answers), every message published before and after it is applied once, and each publish tried
 * while the server is away is refused with `postgres-unavailable` (or waits for it).
 *
 * The three tests run at once, each on servers of its own: each spends most of its time waiting out
 * its minute-long outage, so together they take one worker of the runner for about as long as one.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, inject, it, type ExpectStatic, type OnTestFinishedHandler } from 'vitest';
import { createBus, silentLogger, type MessageBus } from '../../src/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { startPostgresServer, type LocalPostgres } from '../helpers/local-postgres.js';
import { waitFor } from '../helpers/local-redis.js';
import { freshPrefix } from '../helpers/redis.js';
import { RedisServer } from './fixtures/fault-harness.js';
import { readCrashes } from './fixtures/fixture-process.js';
import { Credit } from './fixtures/outage-pause-messages.js';
import { readPgLines } from './fixtures/pg-broker-harness.js';
import { appliedCount, expectOutageRiddenOut, startOutageScene } from './fixtures/pg-broker-outage.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const APP = fileURLToPath(new URL('./fixtures/outage-pause-app.ts', import.meta.url));
const SCHEMA = 'outage';
/** Credits sent before the outage, over {@link BEFORE_MS}. */
const BEFORE = 1_000;
const BEFORE_MS = 5_000;
const OUTAGE_MS = 60_000;
const ACCOUNTS = 40;
const redisUrl = inject('redisUrl');
/** Messages the PostgresBroker test publishes before its outage, and after it. */
const BROKER_BEFORE = 400;
const BROKER_AFTER = 400;

interface AppLine {
  readonly ready?: boolean;
  readonly paused?: { readonly projection: string | null };
  readonly resumed?: { readonly projection: string | null };
  readonly deadLettered?: { readonly reason: string; readonly error: string };
}

/** The app process, its servers and what it printed; everything is stopped when the test ends. */
interface RunningApp {
  readonly postgres: LocalPostgres;
  readonly dlqRedis: RedisServer;
  readonly pool: pg.Pool;
  readonly app: ChildProcess;
  readonly sender: MessageBus;
  readonly lines: readonly AppLine[];
  readonly crashFile: string;
  output(): string;
}

/**
 * Starts the servers, the app process and a sender bus, all stopped when the calling test ends
 * (`onTestFinished` is that test's own: the tests run at once).
 */
async function startApp(
  onTestFinished: (fn: OnTestFinishedHandler, timeout?: number) => void,
): Promise<RunningApp> {
  const [postgres, brokerRedis, dlqRedis] = await Promise.all([
    startPostgresServer('harrier-outage-pg-'),
    RedisServer.start({ appendOnly: false }),
    // AOF on: a dead letter written before the stop would survive it, so none can hide.
    RedisServer.start({ appendOnly: true }),
  ]);
  const crashDir = mkdtempSync(join(tmpdir(), 'harrier-outage-pause-'));
  const pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
  pool.on('error', () => {});
  const started: { app?: ChildProcess; sender?: MessageBus } = {};
  onTestFinished(async () => {
    await started.sender?.stop({ closeBroker: true }).catch(() => undefined);
    const running = started.app;
    if (running !== undefined && running.exitCode === null && running.signalCode === null) {
      const exited = new Promise((resolve) => running.once('exit', resolve));
      running.kill('SIGTERM');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
      running.kill('SIGKILL');
    }
    await pool.end().catch(() => undefined);
    postgres.stop();
    await Promise.all([brokerRedis.destroy(), dlqRedis.destroy()]);
    rmSync(crashDir, { recursive: true, force: true });
  }, 60_000);

  await migratePostgres(pool, { schema: SCHEMA });
  await pool.query(`CREATE TABLE "${SCHEMA}".effects (n integer NOT NULL)`);
  await pool.query(
    `CREATE TABLE "${SCHEMA}".balances (account text PRIMARY KEY, events integer NOT NULL, total bigint NOT NULL)`,
  );
  const prefix = freshPrefix();
  const crashFile = join(crashDir, 'crashes.jsonl');
  const lines: AppLine[] = [];
  let output = '';
  const app = spawn(process.execPath, ['--import', 'tsx', APP], {
    cwd: ROOT,
    env: {
      ...process.env,
      REDIS_URL: brokerRedis.url,
      DLQ_REDIS_URL: dlqRedis.url,
      HARRIER_PREFIX: prefix,
      DATABASE_URL: postgres.url,
      SCHEMA,
      CRASH_FILE: crashFile,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.app = app;
  let partial = '';
  app.stdout.on('data', (chunk: Buffer) => {
    partial += chunk.toString();
    const complete = partial.split('\n');
    partial = complete.pop() ?? '';
    for (const text of complete) {
      if (text.startsWith('{')) lines.push(JSON.parse(text) as AppLine);
    }
  });
  app.stderr.on('data', (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-8_000);
  });
  await waitFor('the app to start', () => lines.some((l) => l.ready === true), {
    timeoutMs: 60_000,
    explain: () => output,
  });
  const sender = createBus({
    endpoint: 'teller',
    broker: new BullMqBroker({ connection: brokerRedis.url, prefix }),
    definitions: [Credit],
    logger: silentLogger,
  });
  started.sender = sender;
  await sender.start();
  return { postgres, dlqRedis, pool, app, sender, lines, crashFile, output: () => output };
}

/** Sends credits `from`..`to - 1` spread evenly over `spanMs` (0: at once). */
async function sendCredits(sender: MessageBus, from: number, to: number, spanMs: number): Promise<void> {
  const started = Date.now();
  for (let n = from; n < to; n++) {
    await sender.send(Credit, { n, account: `acc-${n % ACCOUNTS}`, amount: n });
    const due = started + ((n - from + 1) * spanMs) / (to - from);
    const wait = due - Date.now();
    if (wait > 5) await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

interface Counts {
  readonly effects: number;
  readonly distinct: number;
  readonly events: number;
  readonly total: number;
}

async function counts(pool: pg.Pool): Promise<Counts> {
  const effects = await pool.query<{ all: string; distinct: string }>(
    `SELECT count(*) AS all, count(DISTINCT n) AS distinct FROM "${SCHEMA}".effects`,
  );
  const balances = await pool.query<{ events: string | null; total: string | null }>(
    `SELECT sum(events) AS events, sum(total) AS total FROM "${SCHEMA}".balances`,
  );
  return {
    effects: Number(effects.rows[0]?.all),
    distinct: Number(effects.rows[0]?.distinct),
    events: Number(balances.rows[0]?.events ?? 0),
    total: Number(balances.rows[0]?.total ?? 0),
  };
}

/**
 * Waits until the app handled and projected all `total` credits, then checks that it lost, doubled
 * and dead-lettered none, left nothing in its outbox, recorded nothing that would have crashed it,
 * and still runs; returns its pause and resume lines.
 */
async function expectEveryCreditOnce(
  running: RunningApp,
  total: number,
  expect: ExpectStatic,
): Promise<{ paused: AppLine[]; resumed: AppLine[] }> {
  const { pool, app, lines } = running;
  let last = await counts(pool);
  await waitFor(
    'every credit handled once and projected once',
    async () => {
      last = await counts(pool).catch(() => last);
      return last.effects >= total && last.events >= total;
    },
    { timeoutMs: 120_000, explain: () => `${JSON.stringify(last)}\n${running.output()}` },
  );
  const outbox = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${SCHEMA}".outbox`);

  const deadLettered = lines.filter((l) => l.deadLettered !== undefined);
  const faults = readCrashes(running.crashFile);
  const paused = lines.filter((l) => l.paused !== undefined);
  const resumed = lines.filter((l) => l.resumed !== undefined);
  console.info(
    `[outage] ${paused.length} pauses (${paused.filter((l) => l.paused?.projection !== null).length} of projection lanes), ${resumed.length} resumptions, ${deadLettered.length} dead letters`,
  );
  expect(faults, JSON.stringify(faults.slice(0, 3))).toEqual([]);
  expect(deadLettered, JSON.stringify(deadLettered.slice(0, 3))).toEqual([]);
  expect(last).toEqual({ effects: total, distinct: total, events: total, total: (total * (total - 1)) / 2 });
  expect(Number(outbox.rows[0]?.n)).toBe(0);
  expect(app.exitCode).toBeNull();
  expect(app.signalCode).toBeNull();
  return { paused, resumed };
}

describe.concurrent(
  'an app with inbox handlers in PostgreSQL, an outbox relay and a PostgreSQL projection',
  () => {
    describe('when its PostgreSQL is stopped for 60 s while messages flow', () => {
      it('pauses and resumes: 0 dead letters, 0 skipped events, 0 lost, effects once, read model exact, the process alive', async ({
        expect,
        onTestFinished,
      }) => {
        const running = await startApp(onTestFinished);
        const total = BEFORE + 1_500;
        await sendCredits(running.sender, 0, BEFORE, BEFORE_MS);

        running.postgres.halt();
        await sendCredits(running.sender, BEFORE, total, OUTAGE_MS);
        running.postgres.start();

        const { paused, resumed } = await expectEveryCreditOnce(running, total, expect);
        // The outage paused the endpoint and the projection, and both resumed.
        expect(paused.some((l) => l.paused?.projection === null)).toBe(true);
        expect(resumed.length).toBe(paused.length);
      }, 360_000);
    });

    describe("when its dead-letter store's Redis is stopped for 60 s while messages flow", () => {
      it('handles every message without a pause: 0 dead letters, 0 lost, effects once, read model exact, the process alive', async ({
        expect,
        onTestFinished,
      }) => {
        const running = await startApp(onTestFinished);
        const total = BEFORE + 2_500;
        await sendCredits(running.sender, 0, BEFORE, BEFORE_MS);

        await running.dlqRedis.kill('SIGKILL');
        await sendCredits(running.sender, BEFORE, total, OUTAGE_MS);
        await running.dlqRedis.restart();

        const { paused } = await expectEveryCreditOnce(running, total, expect);
        // No message failed, so none needed the store: nothing paused.
        expect(paused).toEqual([]);
      }, 360_000);
    });
  },
);

describe.concurrent('PostgresBroker outages', () => {
  describe('when PostgreSQL is stopped for 60 s while messages flow', () => {
    it('pauses and resumes: no crash, no dead letter, no attempt spent, every message sent before and after applied once', async ({
      expect,
      onTestFinished,
    }) => {
      const running = await startOutageScene(redisUrl);
      onTestFinished(() => running.close(), 60_000);
      await running.publishBatch(0, BROKER_BEFORE);
      await waitFor(
        'some messages to be applied',
        async () => (await appliedCount(running)) >= BROKER_BEFORE / 4,
        { timeoutMs: 20_000, explain: () => running.worker.output() },
      );

      running.postgres.halt();
      const stoppedAt = Date.now();
      // Publishing goes on through the outage: each try is refused (or waits) until the server is back.
      const during = running.publish(BROKER_BEFORE);
      await waitFor(
        'the publish during the outage to be refused or held',
        () => running.refusals.length > 0 || running.pendingMs() >= 1_000,
        { timeoutMs: 15_000 },
      );
      // The outage's length is what the test is about, not a condition to wait for.
      await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS - (Date.now() - stoppedAt)));
      running.postgres.start();
      await during;
      await running.publishRange(BROKER_BEFORE + 1, BROKER_BEFORE + 1 + BROKER_AFTER);

      const summary = await expectOutageRiddenOut(running, expect);
      const lines = readPgLines(running.outFile);
      expect(
        lines.some((l) => l.outcome === 'paused'),
        'the worker paused',
      ).toBe(true);
      expect(running.acknowledged).toHaveLength(BROKER_BEFORE + 1 + BROKER_AFTER);
      console.info(`[postgres-broker-outage-60s] 60 s stop: ${summary}`);
    }, 180_000);
  });
});
