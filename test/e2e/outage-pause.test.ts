/**
 * Outages pause, they do not dead-letter: an app process (fixtures/outage-pause-app.ts) runs inbox handlers
 * in PostgreSQL, an outbox relay and a PostgreSQL projection while its PostgreSQL is stopped for
 * 60 s, then while its dead-letter store's Redis is stopped for 60 s, with 5,000 messages flowing.
 * The test starts its own PostgreSQL and both Redis servers, since it stops them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBus, silentLogger, type MessageBus } from '../../src/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { startPostgresServer, type LocalPostgres } from '../helpers/local-postgres.js';
import { waitFor } from '../helpers/local-redis.js';
import { freshPrefix } from '../helpers/redis.js';
import { RedisServer } from './fixtures/fault-harness.js';
import { readCrashes } from './fixtures/fixture-process.js';
import { Credit } from './fixtures/outage-pause-messages.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const APP = fileURLToPath(new URL('./fixtures/outage-pause-app.ts', import.meta.url));
const SCHEMA = 'outage';
const TOTAL = 5_000;
const OUTAGE_MS = 60_000;
const ACCOUNTS = 40;

interface AppLine {
  readonly ready?: boolean;
  readonly paused?: { readonly projection: string | null };
  readonly resumed?: { readonly projection: string | null };
  readonly deadLettered?: { readonly reason: string; readonly error: string };
}

let postgres: LocalPostgres;
let brokerRedis: RedisServer;
let dlqRedis: RedisServer;
let pool: pg.Pool;
let app: ChildProcess;
let sender: MessageBus;
const lines: AppLine[] = [];
const crashFile = join(mkdtempSync(join(tmpdir(), 'harrier-outage-pause-')), 'crashes.jsonl');
let output = '';

beforeAll(async () => {
  [postgres, brokerRedis, dlqRedis] = await Promise.all([
    startPostgresServer('harrier-outage-pg-'),
    RedisServer.start({ appendOnly: false }),
    // AOF on: a dead letter written before the stop would survive it, so none can hide.
    RedisServer.start({ appendOnly: true }),
  ]);
  pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
  pool.on('error', () => {});
  await migratePostgres(pool, { schema: SCHEMA });
  await pool.query(`CREATE TABLE "${SCHEMA}".effects (n integer NOT NULL)`);
  await pool.query(
    `CREATE TABLE "${SCHEMA}".balances (account text PRIMARY KEY, events integer NOT NULL, total bigint NOT NULL)`,
  );
  const prefix = freshPrefix();
  app = spawn(process.execPath, ['--import', 'tsx', APP], {
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
  let partial = '';
  app.stdout?.on('data', (chunk: Buffer) => {
    partial += chunk.toString();
    const complete = partial.split('\n');
    partial = complete.pop() ?? '';
    for (const text of complete) {
      if (text.startsWith('{')) lines.push(JSON.parse(text) as AppLine);
    }
  });
  app.stderr?.on('data', (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-8_000);
  });
  await waitFor('the app to start', () => lines.some((l) => l.ready === true), {
    timeoutMs: 60_000,
    explain: () => output,
  });
  sender = createBus({
    endpoint: 'teller',
    broker: new BullMqBroker({ connection: brokerRedis.url, prefix }),
    definitions: [Credit],
    logger: silentLogger,
  });
  await sender.start();
}, 120_000);

afterAll(async () => {
  await sender.stop({ closeBroker: true }).catch(() => undefined);
  if (app.exitCode === null && app.signalCode === null) {
    const exited = new Promise((resolve) => app.once('exit', resolve));
    app.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
    app.kill('SIGKILL');
  }
  await pool.end().catch(() => undefined);
  postgres.stop();
  await Promise.all([brokerRedis.destroy(), dlqRedis.destroy()]);
}, 60_000);

/** Sends credits `from`..`to - 1` spread evenly over `spanMs` (0: at once). */
async function sendCredits(from: number, to: number, spanMs: number): Promise<void> {
  const started = Date.now();
  for (let n = from; n < to; n++) {
    await sender.send(Credit, { n, account: `acc-${n % ACCOUNTS}`, amount: n });
    const due = started + ((n - from + 1) * spanMs) / (to - from);
    const wait = due - Date.now();
    if (wait > 5) await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

async function counts(): Promise<{ effects: number; distinct: number; events: number; total: number }> {
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

describe('an app through a 60 s PostgreSQL outage, then a 60 s outage of its dead-letter store', () => {
  it('pauses and resumes: 0 dead letters, 0 skipped events, 0 lost, effects once, read model exact, the process alive', async () => {
    await sendCredits(0, 1_000, 5_000);

    postgres.halt();
    await sendCredits(1_000, 2_500, OUTAGE_MS);
    postgres.start();

    await dlqRedis.kill('SIGKILL');
    await sendCredits(2_500, TOTAL, OUTAGE_MS);
    await dlqRedis.restart();

    const expectedTotal = (TOTAL * (TOTAL - 1)) / 2;
    let last = await counts();
    await waitFor(
      'every credit handled once and projected once',
      async () => {
        last = await counts().catch(() => last);
        return last.effects >= TOTAL && last.events >= TOTAL;
      },
      { timeoutMs: 120_000, explain: () => `${JSON.stringify(last)}\n${output}` },
    );
    const outbox = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${SCHEMA}".outbox`);

    const deadLettered = lines.filter((l) => l.deadLettered !== undefined);
    const faults = readCrashes(crashFile);
    const paused = lines.filter((l) => l.paused !== undefined);
    const resumed = lines.filter((l) => l.resumed !== undefined);
    console.info(
      `[outage] ${paused.length} pauses (${paused.filter((l) => l.paused?.projection !== null).length} of projection lanes), ${resumed.length} resumptions, ${deadLettered.length} dead letters`,
    );
    expect(faults, JSON.stringify(faults.slice(0, 3))).toEqual([]);
    expect(deadLettered, JSON.stringify(deadLettered.slice(0, 3))).toEqual([]);
    expect(last).toEqual({ effects: TOTAL, distinct: TOTAL, events: TOTAL, total: expectedTotal });
    expect(Number(outbox.rows[0]?.n)).toBe(0);
    // The PostgreSQL outage paused the endpoint and the projection, and both resumed.
    expect(paused.some((l) => l.paused?.projection === null)).toBe(true);
    expect(resumed.length).toBe(paused.length);
    expect(app.exitCode).toBeNull();
    expect(app.signalCode).toBeNull();
  }, 360_000);
});
