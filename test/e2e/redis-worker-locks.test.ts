/**
 * How long a dead worker keeps its messages on Redis, and that a live one keeps them: worker processes
 * (fixtures/redis-worker.ts) on a redis-server of the test's own, one of them killed with SIGKILL
 * while its handlers are mid-message. The lock timings are BullMqBroker's defaults in the first test
 * (what it proves is the defaults' recovery time) and small ones set by options in the second.
 */
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/index.js';
import { prepareMessage, type OutgoingMessage } from '../../src/extend.js';
import { BullMqBroker } from '../../src/redis/index.js';
import {
  RedisServer,
  readWorkLines,
  startWorker,
  stopAllWorkers,
  tempDir,
  waitFor,
  type LockTimings,
} from './fixtures/fault-harness.js';
import { DoWork, WorkRequested, type WorkLine } from './fixtures/fault-messages.js';

/** The longest a dead worker's message may wait for another worker, from the kill to handled. */
const RECOVERY_BUDGET_MS = 15_000;

function freshPrefix(): string {
  return `{locks-${randomUUID().slice(0, 8)}}`;
}

/** `count` messages, half commands and half events, each reaching one handler of the worker endpoint. */
function workMessages(count: number): OutgoingMessage[] {
  const now = Date.now();
  return Array.from(
    { length: count },
    (_, n) => prepareMessage(n % 2 === 0 ? DoWork : WorkRequested, { n }, {}, { now }).outgoing,
  );
}

/** Publishes `messages` from a broker of the test's own, closed afterwards. */
async function publish(
  redisUrl: string,
  prefix: string,
  messages: readonly OutgoingMessage[],
): Promise<void> {
  const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
  try {
    await broker.publishBatch(messages);
  } finally {
    await broker.close();
  }
}

function linesOf(file: string, outcome: WorkLine['outcome']): WorkLine[] {
  return readWorkLines(file).filter((line) => line.outcome === outcome);
}

/** The message ids of `lines`, sorted. */
function idsOf(lines: readonly WorkLine[]): string[] {
  return lines.map((line) => line.messageId ?? '?').sort();
}

describe('BullMqBroker', () => {
  let dir: string;
  let redis: RedisServer;

  beforeAll(async () => {
    redis = await RedisServer.start({ appendOnly: false });
  });

  afterAll(async () => {
    await redis.destroy();
  });

  beforeEach(() => {
    dir = tempDir();
  });

  afterEach(async () => {
    await stopAllWorkers();
    rmSync(dir, { recursive: true, force: true });
  });

  describe('lock defaults', () => {
    describe('when a worker is killed with SIGKILL while its handlers are mid-message', () => {
      it('hands every one of its messages to a live worker, handled within 15 s of the kill', async () => {
        const prefix = freshPrefix();
        const outA = join(dir, 'worker-a.jsonl');
        const outB = join(dir, 'worker-b.jsonl');
        const messages = workMessages(8);
        const expected = messages.map((m) => m.id).sort();
        // A takes all 8 and would work on each for 10 minutes: none ends before the kill.
        const workerA = await startWorker({
          redisUrl: redis.url,
          prefix,
          outFile: outA,
          handleMs: 600_000,
          concurrency: 8,
          lock: 'broker-defaults',
          recordStarts: true,
        });
        await publish(redis.url, prefix, messages);
        await waitFor('worker A to start on every message', () => linesOf(outA, 'started').length === 8, {
          timeoutMs: 15_000,
          explain: () => workerA.output(),
        });
        // B is up before the kill, so what is timed is the hand-over, not a process start.
        const workerB = await startWorker({
          redisUrl: redis.url,
          prefix,
          outFile: outB,
          concurrency: 8,
          lock: 'broker-defaults',
          recordStarts: true,
        });
        expect(linesOf(outB, 'started'), 'B got nothing while A held every message').toEqual([]);

        const killedAt = Date.now();
        await workerA.kill('SIGKILL');
        await waitFor(
          `worker B to handle all 8 messages within ${RECOVERY_BUDGET_MS} ms of the kill`,
          () => linesOf(outB, 'handled').length >= 8,
          {
            timeoutMs: RECOVERY_BUDGET_MS - (Date.now() - killedAt),
            explain: () =>
              `${linesOf(outB, 'handled').length} of 8 handled by B ${Date.now() - killedAt} ms after the kill; B says:\n${workerB.output()}`,
          },
        );

        const handled = linesOf(outB, 'handled');
        expect(idsOf(handled)).toEqual(expected);
        expect(linesOf(outA, 'handled'), 'A never finished one').toEqual([]);
        const slowest = Math.max(...handled.map((line) => (line.endedAt ?? Infinity) - killedAt));
        expect(slowest).toBeLessThanOrEqual(RECOVERY_BUDGET_MS);
        // The delivery A took and never settled counted as an attempt.
        expect(handled.map((line) => line.attempt)).toEqual(handled.map(() => 2));
        console.info(
          `[redis-worker-locks] SIGKILL with 8 messages mid-handler: all handled by the other worker ${Math.min(...handled.map((line) => (line.endedAt ?? 0) - killedAt))}-${slowest} ms after the kill`,
        );
      }, 60_000);
    });
  });

  describe('lock renewal', () => {
    describe('when handlers run three times as long as the lock duration', () => {
      const lock: LockTimings = { lockDurationMs: 1_000, stalledIntervalMs: 500 };

      it('keeps their locks: no message is taken by another worker while its worker lives', async () => {
        const prefix = freshPrefix();
        const outA = join(dir, 'worker-a.jsonl');
        const outB = join(dir, 'worker-b.jsonl');
        const handleMs = 3 * lock.lockDurationMs;
        const common = { redisUrl: redis.url, prefix, handleMs, concurrency: 8, lock, recordStarts: true };
        // Both run stalled checks (every 500 ms) the whole time either holds a message.
        const workers = await Promise.all([
          startWorker({ ...common, outFile: outA }),
          startWorker({ ...common, outFile: outB }),
        ]);
        const messages = workMessages(8);
        const expected = messages.map((m) => m.id).sort();
        await publish(redis.url, prefix, messages);
        const handledLines = (): WorkLine[] => [...linesOf(outA, 'handled'), ...linesOf(outB, 'handled')];
        await waitFor('every message to be handled', () => handledLines().length >= 8, {
          timeoutMs: 30_000,
          explain: () => workers.map((worker) => worker.output()).join('\n---\n'),
        });
        // A lock lost mid-handler would have the message started again by a worker with a free slot
        // (8 messages, 8 slots in each), within a stalled check or two, long before the first call ends.
        expect(idsOf([...linesOf(outA, 'started'), ...linesOf(outB, 'started')])).toEqual(expected);
        const handled = handledLines();
        expect(idsOf(handled)).toEqual(expected);
        expect(handled.map((line) => line.attempt)).toEqual(handled.map(() => 1));
        for (const line of handled) {
          // Node's timers may fire a millisecond before Date.now() says the delay passed.
          expect((line.endedAt ?? 0) - (line.startedAt ?? 0)).toBeGreaterThanOrEqual(handleMs - 5);
        }
        expect(workers.every((worker) => worker.running)).toBe(true);
      }, 60_000);
    });
  });
});
