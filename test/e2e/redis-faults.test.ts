/**
 * Fault tests of the Redis transport (DESIGN.md guarantees 1 and 2): worker processes killed with
 * SIGKILL, a Redis killed and restarted with AOF on, and bad input pushed into a queue by something
 * other than Harrier. Each describe starts a redis-server of its own, never the shared one, since
 * these tests kill it; workers are separate processes (fixtures/redis-worker.ts) that record one
 * line per handled message in a file the test reads.
 */
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  HarrierError,
  createBus,
  silentLogger,
  uuidv7,
  type DeadLetterRecord,
  type Envelope,
  type MessageBus,
} from '../../src/index.js';
import { encodeEnvelope, prepareMessage, type OutgoingMessage } from '../../src/extend.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { allDeadLetters } from '../helpers/dead-letters.js';
import {
  RedisServer,
  readWorkLines,
  startWorker,
  stopAllWorkers,
  tempDir,
  waitFor,
} from './fixtures/fault-harness.js';
import {
  DoWork,
  FAULT_DEFINITIONS,
  HANDLER_OF,
  PostEntry,
  WorkRequested,
  type WorkLine,
} from './fixtures/fault-messages.js';

const ENDPOINT = 'faults';

/** One delivery of one message to one handler: what "handled" and "dead-lettered" are counted by. */
function keyOf(handler: string | undefined, messageId: string | undefined): string {
  return `${handler ?? '?'}/${messageId ?? '?'}`;
}

function expectedKey(message: OutgoingMessage): string {
  return keyOf(message.kind === 'event' ? HANDLER_OF.event : HANDLER_OF.command, message.id);
}

function handledKeys(lines: readonly WorkLine[]): string[] {
  return lines
    .filter((line) => line.outcome === 'handled')
    .map((line) => keyOf(line.handler, line.messageId));
}

function freshPrefix(): string {
  return `{faults-${randomUUID().slice(0, 8)}}`;
}

/** A publisher in the test process: a bus with no handlers, and the worker endpoint's dead letters. */
interface Producer {
  readonly bus: MessageBus;
  readonly broker: BullMqBroker;
  readonly deadLetters: RedisDeadLetterStore;
  /** Every dead letter of the worker endpoint. */
  deadLettered(): Promise<DeadLetterRecord[]>;
  close(): Promise<void>;
}

function createProducer(redisUrl: string, prefix: string): Producer {
  const broker = new BullMqBroker({
    connection: redisUrl,
    prefix,
    publishTimeoutMs: 1_000,
    logger: silentLogger,
  });
  const bus = createBus({
    endpoint: 'faults-producer',
    broker,
    definitions: FAULT_DEFINITIONS,
    logger: silentLogger,
  });
  const deadLetters = new RedisDeadLetterStore({ connection: redisUrl, prefix });
  return {
    bus,
    broker,
    deadLetters,
    deadLettered: () => allDeadLetters(deadLetters, ENDPOINT),
    close: async () => {
      await bus.stop();
      await deadLetters.close();
    },
  };
}

function sorted(values: Iterable<string>): string[] {
  return [...values].sort();
}

/** Whether a failed publish is one the caller should repeat (same id: a second add is deduplicated). */
function isRetryablePublishError(error: unknown): boolean {
  return HarrierError.is(error) && (error.code === 'redis-unavailable' || error.code === 'publish-failed');
}

describe('BullMqBroker faults', () => {
  let dir: string;

  beforeEach(() => {
    dir = tempDir();
  });

  afterEach(async () => {
    await stopAllWorkers();
    rmSync(dir, { recursive: true, force: true });
  });

  describe('when a worker is killed with SIGKILL mid-batch', () => {
    let redis: RedisServer;

    beforeAll(async () => {
      redis = await RedisServer.start({ appendOnly: false });
    });

    afterAll(async () => {
      await redis.destroy();
    });

    it('loses nothing: every message is handled or dead-lettered by the next worker', async () => {
      const prefix = freshPrefix();
      const outA = join(dir, 'worker-a.jsonl');
      const outB = join(dir, 'worker-b.jsonl');
      const producer = createProducer(redis.url, prefix);
      try {
        // Started first: registering its subscriptions is what makes events reach it.
        const workerA = await startWorker({
          redisUrl: redis.url,
          prefix,
          outFile: outA,
          handleMs: 20,
          concurrency: 8,
        });
        const now = Date.now();
        const messages = Array.from({ length: 300 }, (_, n) => {
          // Every 37th message always fails (dead-lettered after 3 attempts), every 7th fails once.
          const failAttempts = n % 37 === 0 ? 99 : n % 7 === 0 ? 1 : 0;
          const payload = { n, ...(failAttempts > 0 ? { failAttempts } : {}) };
          return prepareMessage(n % 2 === 0 ? DoWork : WorkRequested, payload, {}, { now }).outgoing;
        });
        const poison = new Set(messages.filter((_, n) => n % 37 === 0).map(expectedKey));
        const expected = new Set(messages.map(expectedKey));
        await producer.broker.publishBatch(messages);

        await waitFor('worker A to handle 50 messages', () => handledKeys(readWorkLines(outA)).length >= 50, {
          timeoutMs: 15_000,
          explain: () => workerA.output(),
        });
        await workerA.kill('SIGKILL');
        const handledByA = handledKeys(readWorkLines(outA));

        const workerB = await startWorker({
          redisUrl: redis.url,
          prefix,
          outFile: outB,
          handleMs: 20,
          concurrency: 8,
        });
        let covered = new Set<string>();
        await waitFor(
          'every message to be handled or dead-lettered',
          async () => {
            const dead = (await producer.deadLettered()).map((r) => keyOf(r.handler, r.messageId));
            covered = new Set([
              ...handledKeys(readWorkLines(outA)),
              ...handledKeys(readWorkLines(outB)),
              ...dead,
            ]);
            return [...expected].every((key) => covered.has(key));
          },
          {
            timeoutMs: 25_000,
            explain: () =>
              `${[...expected].filter((key) => !covered.has(key)).length} of ${expected.size} not done; worker B says:\n${workerB.output()}`,
          },
        );

        const linesOfB = readWorkLines(outB).filter((line) => line.outcome === 'handled');
        const handledByB = handledKeys(linesOfB);
        const handled = [...handledByA, ...handledByB];
        const dead = (await producer.deadLettered()).map((r) => keyOf(r.handler, r.messageId));
        // A message that never fails on purpose reaches B on attempt 2 only if A died holding it.
        const neverFails = new Set(messages.filter((_, n) => n % 7 !== 0 && n % 37 !== 0).map((m) => m.id));
        const takenFromA = linesOfB.filter(
          (line) => line.attempt > 1 && neverFails.has(line.messageId ?? ''),
        );
        expect(handledByA.length, 'worker A was killed before it finished').toBeLessThan(expected.size);
        expect(takenFromA.length, 'worker B took over messages worker A held').toBeGreaterThan(0);
        expect(sorted(new Set([...handled, ...dead]))).toEqual(sorted(expected));
        expect(sorted(dead)).toEqual(sorted(poison));
        console.info(
          `[redis-faults] SIGKILL: ${expected.size} messages, A handled ${handledByA.length} before the kill, B ${handledByB.length} (${takenFromA.length} held by A when it died), ${dead.length} dead-lettered, ${handled.length - new Set(handled).size} handled twice`,
        );
      } finally {
        await producer.close();
      }
    }, 45_000);
  });

  describe('when two worker processes share ordered keys and one stops mid-stream', () => {
    let redis: RedisServer;

    beforeAll(async () => {
      redis = await RedisServer.start({ appendOnly: false });
    });

    afterAll(async () => {
      await redis.destroy();
    });

    it('handles each key one message at a time in publish order, across both processes', async () => {
      const prefix = freshPrefix();
      const outA = join(dir, 'ordered-a.jsonl');
      const outB = join(dir, 'ordered-b.jsonl');
      const producer = createProducer(redis.url, prefix);
      try {
        const settings = { redisUrl: redis.url, prefix, handleMs: 15, concurrency: 8, ordered: true };
        const workerA = await startWorker({ ...settings, outFile: outA });
        const workerB = await startWorker({ ...settings, outFile: outB });
        const accounts = ['acc-0', 'acc-1', 'acc-2', 'acc-3', 'acc-4', 'acc-5'];
        const perAccount = 20;
        const now = Date.now();
        // Interleaved accounts, n = 1..20 within each; n = 3 of acc-0 fails once and is retried in place.
        const messages = Array.from({ length: perAccount }, (_, i) =>
          accounts.map(
            (account) =>
              prepareMessage(
                PostEntry,
                { account, n: i + 1, ...(account === 'acc-0' && i === 2 ? { failAttempts: 1 } : {}) },
                {},
                { now },
              ).outgoing,
          ),
        ).flat();
        await producer.broker.publishBatch(messages);
        const handled = (): WorkLine[] =>
          [...readWorkLines(outA), ...readWorkLines(outB)].filter((line) => line.outcome === 'handled');

        // Stop one process gracefully while both are busy: the keys it held go on in the other.
        await waitFor(
          'a third of the messages to be handled',
          () => handled().length >= messages.length / 3,
          {
            timeoutMs: 15_000,
            explain: () => `A says:\n${workerA.output()}\nB says:\n${workerB.output()}`,
          },
        );
        const byA = readWorkLines(outA).length;
        const byB = readWorkLines(outB).length;
        await (byA >= byB ? workerA : workerB).kill('SIGTERM');
        await waitFor('every message to be handled', () => handled().length >= messages.length, {
          timeoutMs: 20_000,
          explain: () =>
            `${handled().length} of ${messages.length}; A says:\n${workerA.output()}\nB says:\n${workerB.output()}`,
        });

        const lines = handled();
        expect(lines).toHaveLength(messages.length);
        const handledByBoth: string[] = [];
        for (const account of accounts) {
          const ofAccount = lines
            .filter((line) => line.account === account)
            .sort((a, b) => (a.startedAt ?? 0) - (b.startedAt ?? 0));
          expect(
            ofAccount.map((line) => line.n),
            account,
          ).toEqual(Array.from({ length: perAccount }, (_, i) => i + 1));
          // One at a time: each message of the key began only after the one before it had finished.
          for (let i = 1; i < ofAccount.length; i++) {
            expect(ofAccount[i]?.startedAt ?? 0, `${account} #${i + 1}`).toBeGreaterThanOrEqual(
              ofAccount[i - 1]?.endedAt ?? Infinity,
            );
          }
          if (new Set(ofAccount.map((line) => line.pid)).size === 2) handledByBoth.push(account);
        }
        expect(lines.find((line) => line.account === 'acc-0' && line.n === 3)?.attempt).toBe(2);
        expect(handledByBoth.length, 'some key was handled by both processes').toBeGreaterThan(0);
        console.info(
          `[redis-faults] ordered: ${messages.length} messages over ${accounts.length} keys, ${handledByBoth.length} keys handled by both processes (${lines.filter((l) => l.pid === workerA.pid).length} by A, ${lines.filter((l) => l.pid === workerB.pid).length} by B)`,
        );
      } finally {
        await producer.close();
      }
    }, 45_000);
  });

  describe('when Redis is killed and restarted with AOF on', () => {
    let redis: RedisServer;

    beforeAll(async () => {
      redis = await RedisServer.start({ appendOnly: true });
    });

    afterAll(async () => {
      await redis.destroy();
    });

    it('loses no acknowledged publish, and the worker resumes by itself', async () => {
      const prefix = freshPrefix();
      const out = join(dir, 'worker.jsonl');
      const total = 200;
      const worker = await startWorker({
        redisUrl: redis.url,
        prefix,
        outFile: out,
        handleMs: 50,
        concurrency: 4,
      });
      const producer = createProducer(redis.url, prefix);
      const acknowledged: string[] = [];
      let refused = 0;
      /** Set when the test ends early, so the publishing loop stops. */
      const run = { abandoned: false };
      /** Publishes one message, again with the same id while Redis is away (a producer fails fast). */
      const publish = async (n: number): Promise<void> => {
        const id = uuidv7();
        await waitFor(
          `publish ${n} to be accepted`,
          async () => {
            if (run.abandoned) throw new Error('The test failed; publishing abandoned');
            try {
              if (n % 2 === 0) await producer.bus.send(DoWork, { n }, { id });
              else await producer.bus.publish(WorkRequested, { n }, { id });
              return true;
            } catch (error) {
              if (!isRetryablePublishError(error)) throw error;
              refused++;
              return false;
            }
          },
          { timeoutMs: 20_000 },
        );
        acknowledged.push(keyOf(n % 2 === 0 ? HANDLER_OF.command : HANDLER_OF.event, id));
      };
      let killed = false;
      // One publish after another, each awaited (acknowledged) before the next, while Redis dies.
      // The last one waits for the kill, so a publish always meets the outage: a producer that got
      // through all of them before the worker had handled five left nothing to refuse.
      const publishing = (async () => {
        for (let n = 0; n < total && !run.abandoned; n++) {
          if (n === total - 1) {
            await waitFor('Redis to be killed', () => killed || run.abandoned, { timeoutMs: 30_000 });
          }
          await publish(n);
        }
      })().then(
        () => undefined,
        (error: unknown) => (error instanceof Error ? error : new Error(String(error))),
      );
      try {
        await waitFor(
          'half the messages to be acknowledged while the worker is handling',
          () => acknowledged.length >= total / 2 && handledKeys(readWorkLines(out)).length >= 5,
          { timeoutMs: 15_000, explain: () => worker.output() },
        );
        await redis.kill('SIGKILL');
        killed = true;
        const acknowledgedAtKill = acknowledged.length;
        const handledAtKill = handledKeys(readWorkLines(out)).length;
        // Redis stays away until the producer has felt it, so the outage is not over before it began.
        await waitFor('a publish to be refused while Redis is away', () => refused > 0, {
          timeoutMs: 10_000,
        });
        await redis.restart();
        const publishFailure = await publishing;
        if (publishFailure !== undefined) throw publishFailure;

        let missing: string[] = [];
        await waitFor(
          'every acknowledged message to be handled or dead-lettered',
          async () => {
            const done = new Set([
              ...handledKeys(readWorkLines(out)),
              ...(await producer.deadLettered()).map((r) => keyOf(r.handler, r.messageId)),
            ]);
            missing = acknowledged.filter((key) => !done.has(key));
            return missing.length === 0;
          },
          {
            timeoutMs: 30_000,
            explain: () =>
              `${missing.length} of ${acknowledged.length} missing; the worker says:\n${worker.output()}`,
          },
        );

        expect(worker.running, 'the same worker process, never restarted').toBe(true);
        expect(handledAtKill, 'the worker still had work when Redis was killed').toBeLessThan(
          acknowledgedAtKill,
        );
        expect(acknowledged).toHaveLength(total);
        expect(missing).toEqual([]);
        const handled = handledKeys(readWorkLines(out));
        console.info(
          `[redis-faults] Redis restart: ${total} acknowledged (${acknowledgedAtKill} before the kill), ${handledAtKill} handled before the kill, ${refused} publish attempts refused while Redis was away, ${handled.length - new Set(handled).size} handled twice`,
        );
      } finally {
        run.abandoned = true;
        await publishing;
        await producer.close();
      }
    }, 60_000);
  });

  describe('when bad input is pushed straight into a command queue', () => {
    let redis: RedisServer;

    beforeAll(async () => {
      redis = await RedisServer.start({ appendOnly: false });
    });

    afterAll(async () => {
      await redis.destroy();
    });

    it('dead-letters each with its reason and the worker keeps handling', async () => {
      const prefix = freshPrefix();
      const out = join(dir, 'worker.jsonl');
      const worker = await startWorker({ redisUrl: redis.url, prefix, outFile: out });
      const producer = createProducer(redis.url, prefix);
      const client = new Redis(redis.url);
      // The queue BullMqBroker names for a command type: `cmd~<type>` under the key prefix.
      const queue = new Queue(`cmd~${DoWork.type}`, { connection: client, prefix });
      try {
        const envelope = (payload: { n: number; note?: string }): Envelope =>
          prepareMessage(DoWork, payload, {}, { now: Date.now(), maxBytes: 4 * 1024 * 1024 }).envelope;
        const jobShape = (body: string, id: string): Record<string, unknown> => ({
          b: body,
          i: id,
          k: 'command',
          a: 0,
          h: [],
        });
        const notJsonId = uuidv7();
        const unknown = { ...envelope({ n: 4 }), type: 'faults.NoSuchWork' };
        const invalid = { ...envelope({ n: 5 }), payload: { n: 'five' } };
        const large = envelope({ n: 6, note: 'x'.repeat(1024 * 1024) });
        const foreign = { hello: 'world', n: 2 };
        const cases = [
          { label: 'garbage string', name: 'garbage', data: 'not a message {{', body: 'not a message {{' },
          { label: 'foreign object', name: 'foreign', data: foreign, body: JSON.stringify(foreign) },
          {
            label: 'job with a body that is not JSON',
            name: DoWork.type,
            data: jobShape('{"v":1,"id":', notJsonId),
            body: '{"v":1,"id":',
          },
          {
            label: 'unknown type',
            name: unknown.type,
            data: jobShape(encodeEnvelope(unknown), unknown.id),
            body: encodeEnvelope(unknown),
          },
          {
            label: 'schema violation',
            name: DoWork.type,
            data: jobShape(encodeEnvelope(invalid), invalid.id),
            body: encodeEnvelope(invalid),
          },
          {
            label: 'over 1 MiB',
            name: DoWork.type,
            data: jobShape(encodeEnvelope(large), large.id),
            body: encodeEnvelope(large),
          },
        ];
        for (const entry of cases) await queue.add(entry.name, entry.data);
        const goodId = await producer.bus.send(DoWork, { n: 7 });

        await waitFor(
          'six dead letters and the good message handled',
          async () =>
            (await producer.deadLettered()).length >= cases.length &&
            readWorkLines(out).some((line) => line.outcome === 'handled' && line.messageId === goodId),
          { timeoutMs: 15_000, explain: () => worker.output() },
        );

        const records = await producer.deadLettered();
        const outcome = records.map((record) => ({
          label:
            cases.find((entry) => entry.body === record.envelope)?.label ?? 'an envelope we did not push',
          reason: record.reason,
          messageId: record.messageId,
        }));
        expect(outcome.sort((x, y) => x.label.localeCompare(y.label))).toEqual(
          [
            // Bytes without an envelope id are known by their job id (added first and second).
            { label: 'garbage string', reason: 'malformed', messageId: '1' },
            { label: 'foreign object', reason: 'malformed', messageId: '2' },
            { label: 'job with a body that is not JSON', reason: 'malformed', messageId: notJsonId },
            { label: 'unknown type', reason: 'unknown-type', messageId: unknown.id },
            { label: 'schema violation', reason: 'validation-failed', messageId: invalid.id },
            { label: 'over 1 MiB', reason: 'too-large', messageId: large.id },
          ].sort((x, y) => x.label.localeCompare(y.label)),
        );
        expect(worker.running).toBe(true);
      } finally {
        await queue.close();
        client.disconnect();
        await producer.close();
      }
    }, 30_000);
  });
});
