/**
 * Three processes run the same recurring schedule on one Redis (`everyMs: 200`, standing for an
 * every-second schedule), one of them killed with SIGKILL on the way: each tick is handled once,
 * and none is missing while any process runs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import 'reflect-metadata';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  CommandHandler,
  SCHEDULE_TICK_HEADER,
  createBus,
  silentLogger,
  type MessageBus,
  type MessageContext,
} from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';
import { Heartbeat } from './fixtures/every-messages.js';

const redisUrl = inject('redisUrl');
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SCRIPT = join(ROOT, 'test', 'e2e', 'fixtures', 'every-worker.ts');
const EVERY_MS = 200;

const children = new Set<ChildProcess>();

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => {
      resolve();
    });
  });
}

async function startWorker(prefix: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT], {
    cwd: ROOT,
    env: { ...process.env, REDIS_URL: redisUrl, HARRIER_PREFIX: prefix, EVERY_MS: String(EVERY_MS) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-8_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  await waitFor(
    'the schedule worker to be ready',
    () => output.includes('"ready":true') || child.exitCode !== null,
    {
      timeoutMs: 20_000,
      explain: () => output,
    },
  );
  if (child.exitCode !== null) throw new Error(`The schedule worker exited before it was ready:\n${output}`);
  return child;
}

async function stop(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  const gone = exited(child);
  child.kill(signal);
  await gone;
  children.delete(child);
}

describe('MessageBus.every in 3 processes on Redis', () => {
  const prefix = freshPrefix();
  let consumer: MessageBus | undefined;

  afterEach(async () => {
    await Promise.all([...children].map((child) => stop(child, 'SIGKILL')));
    await consumer?.stop({ gracePeriodMs: 200 });
    const admin = new Redis(redisUrl);
    await deleteKeys(admin, prefix);
    await admin.quit();
  });

  it('handles each tick once, with none missing, when one process is killed on the way', async () => {
    const ticks: string[] = [];
    @CommandHandler(Heartbeat)
    class HeartbeatHandler {
      handle(_payload: unknown, context: MessageContext): void {
        ticks.push(context.headers[SCHEDULE_TICK_HEADER] ?? 'none');
      }
    }
    consumer = createBus({
      endpoint: 'heartbeats',
      broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
      handlers: [HeartbeatHandler],
      logger: silentLogger,
    });
    await consumer.start();
    const workers = await Promise.all([startWorker(prefix), startWorker(prefix), startWorker(prefix)]);
    const from = Date.now();
    await waitFor('10 ticks', () => ticks.length >= 10, { timeoutMs: 10_000 });
    const [first] = workers;
    await stop(first, 'SIGKILL');
    const countAtKill = ticks.length;
    await waitFor('10 more ticks after the kill', () => ticks.length >= countAtKill + 10, {
      timeoutMs: 10_000,
    });
    await Promise.all(workers.slice(1).map((child) => stop(child, 'SIGTERM')));
    const to = Date.now();
    // What the last tick sent is handled within a few ticks' time.
    await new Promise((resolve) => setTimeout(resolve, 5 * EVERY_MS));

    expect(new Set(ticks).size).toBe(ticks.length);
    const times = ticks.map((t) => Date.parse(t)).sort((a, b) => a - b);
    for (let i = 1; i < times.length; i++) expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBe(EVERY_MS);
    // All three were running before `from` and two until `to`: every tick of the window, within 1.
    const expected = Math.floor(to / EVERY_MS) - Math.floor(from / EVERY_MS);
    expect(ticks.length).toBeGreaterThanOrEqual(expected - 1);
  }, 60_000);
});
