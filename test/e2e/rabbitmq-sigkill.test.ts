/**
 * Worker processes on RabbitMqBroker killed with SIGKILL mid-handler (DESIGN.md guarantee 1, and
 * "a delivery taken and never settled counts as an attempt"): RabbitMQ gives back what the dead
 * process held as soon as its connection drops, the surviving or restarted worker handles it, and
 * the quorum queue's `x-delivery-count` shows in the attempt number (the unsettled end). The
 * workers (fixtures/rabbitmq-worker.ts) kill themselves in the handler of a chosen message, on its
 * first attempt, so the kill lands exactly where the test wants it. There is no inbox: a message
 * whose handler had finished but whose ack had not left the dead process runs again, and the test
 * counts those.
 */
import { join } from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { prepareMessage, type OutgoingMessage } from '../../src/extend.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { DoWork } from './fixtures/fault-messages.js';
import {
  readRabbitLines,
  useRabbitFaultTests,
  waitFor,
  type RabbitWorkLine,
} from './fixtures/rabbitmq-harness.js';

const redisUrl = inject('redisUrl');
let rabbitUrl: string;

beforeAll(async () => {
  rabbitUrl = await rabbitmqUrl();
}, 60_000);

const TOTAL = 300;
const CRASH_AT = 150;

const faults = useRabbitFaultTests();

function workMessages(count: number): OutgoingMessage[] {
  const now = Date.now();
  return Array.from({ length: count }, (_, n) => prepareMessage(DoWork, { n }, {}, { now }).outgoing);
}

/** The ids of the `outcome` lines in `lines`. */
function idsOf(lines: readonly RabbitWorkLine[], outcome: RabbitWorkLine['outcome']): Set<string> {
  return new Set(lines.filter((l) => l.outcome === outcome).map((l) => l.messageId ?? ''));
}

/** What the dead worker held: the messages it had begun and not recorded as handled. */
function heldByDead(lines: readonly RabbitWorkLine[]): Set<string> {
  const handled = idsOf(lines, 'handled');
  return new Set([...idsOf(lines, 'started')].filter((id) => !handled.has(id)));
}

/** Waits until every message of `messages` has a handled line in `files`. */
async function waitForEveryMessage(
  files: readonly string[],
  messages: readonly OutgoingMessage[],
  explain: () => string,
): Promise<RabbitWorkLine[]> {
  let handled = new Set<string>();
  await waitFor(
    'every message to be handled',
    () => {
      handled = idsOf(
        files.flatMap((file) => readRabbitLines(file)),
        'handled',
      );
      return messages.every((m) => handled.has(m.id));
    },
    { timeoutMs: 30_000, explain: () => `${handled.size} of ${messages.length} handled\n${explain()}` },
  );
  return files.flatMap((file) => readRabbitLines(file));
}

describe('RabbitMqBroker with a worker killed by SIGKILL', () => {
  describe('when one of two competing workers dies mid-handler', () => {
    it('gives what it held to the surviving worker, which handles each on attempt 2 (its unsettled end): nothing lost', async () => {
      const site = faults.freshSite(rabbitUrl, redisUrl);
      const outA = join(site.dir, 'worker-a.jsonl');
      const outB = join(site.dir, 'worker-b.jsonl');
      // Both would kill themselves on the message's first attempt: whichever takes it dies, and the
      // other one, the survivor, gets it on its second.
      const common = { recordStarts: true, handleMs: 20, concurrency: 8, crashAtN: CRASH_AT };
      const [workerA, workerB] = await Promise.all([
        faults.startWorker(site, { ...common, outFile: outA }),
        faults.startWorker(site, { ...common, outFile: outB }),
      ]);
      const producer = faults.producer(site);
      const messages = workMessages(TOTAL);
      const crashId = messages[CRASH_AT]?.id ?? '';
      await producer.broker.publishBatch(messages);

      const explain = (): string => `A says:\n${workerA.output()}\nB says:\n${workerB.output()}`;
      await waitFor('one worker to die', () => !workerA.running || !workerB.running, {
        timeoutMs: 20_000,
        explain,
      });
      const [dead, survivor] = workerA.running ? [workerB, workerA] : [workerA, workerB];
      const [deadOut, survivorOut] = workerA.running ? [outB, outA] : [outA, outB];
      await dead.exited();
      const lines = await waitForEveryMessage([outA, outB], messages, explain);

      const deadLines = readRabbitLines(deadOut);
      const survivorLines = readRabbitLines(survivorOut);
      const crashing = deadLines.find((l) => l.outcome === 'crashing');
      expect(crashing?.messageId, 'the worker died in the handler of the chosen message').toBe(crashId);
      expect(survivor.running, 'the survivor is still running').toBe(true);
      const held = heldByDead(deadLines);
      expect(held.has(crashId)).toBe(true);
      const firstStart = new Map<string, RabbitWorkLine>();
      for (const line of survivorLines) {
        if (line.outcome === 'started' && !firstStart.has(line.messageId ?? '')) {
          firstStart.set(line.messageId ?? '', line);
        }
      }
      const crashedAt = crashing?.crashedAt ?? 0;
      // Every message the dead worker had begun came back to the survivor after the kill, counted.
      for (const id of held) {
        expect(
          firstStart.get(id)?.startedAt ?? 0,
          `${id} started in the survivor after the kill`,
        ).toBeGreaterThan(crashedAt);
        expect(firstStart.get(id)?.attempt, `${id}'s attempt in the survivor`).toBe(2);
      }
      const survivorHandled = survivorLines.filter((l) => l.outcome === 'handled');
      expect(survivorHandled.find((l) => l.messageId === crashId)?.attempt).toBe(2);
      // Its ack lost with the process, a message the dead worker had handled may run again.
      const deadHandled = idsOf(deadLines, 'handled');
      const twice = survivorHandled.filter((l) => deadHandled.has(l.messageId ?? ''));
      expect(
        twice.filter((l) => l.attempt !== 2),
        'messages handled again on other than their second attempt',
      ).toEqual([]);
      // Only what the dead worker had taken carries an unsettled end: at most its prefetch (its
      // concurrency, on the one queue), and nothing ran on a later attempt.
      const countedEnds = survivorHandled.filter((l) => l.attempt === 2).length;
      expect(countedEnds).toBeLessThanOrEqual(common.concurrency);
      expect(lines.filter((l) => l.outcome === 'handled' && l.attempt > 2)).toEqual([]);
      expect(await producer.deadLettered()).toEqual([]);
      console.info(
        `[rabbitmq-sigkill] surviving worker: the dead one handled ${deadHandled.size} and held ${held.size} begun when killed; the survivor handled ${survivorHandled.length}, ${countedEnds} of them on attempt 2 (their unsettled end), ${twice.length} handled twice`,
      );
    }, 60_000);
  });

  describe('when the only worker dies mid-handler and is started again', () => {
    it('gives what it held to the new process, the message it died in on attempt 2: nothing lost', async () => {
      const site = faults.freshSite(rabbitUrl, redisUrl);
      const outA = join(site.dir, 'worker-a.jsonl');
      const outB = join(site.dir, 'worker-b.jsonl');
      const common = { recordStarts: true, handleMs: 10, concurrency: 8 };
      const first = await faults.startWorker(site, { ...common, outFile: outA, crashAtN: CRASH_AT });
      // Loaded now and started the moment the first is gone.
      const second = await faults.startWorker(site, { ...common, outFile: outB, startOnSignal: true });
      const producer = faults.producer(site);
      const messages = workMessages(TOTAL);
      const crashId = messages[CRASH_AT]?.id ?? '';
      await producer.broker.publishBatch(messages);

      await first.exited();
      await second.go();
      const explain = (): string => `first says:\n${first.output()}\nsecond says:\n${second.output()}`;
      await waitForEveryMessage([outA, outB], messages, explain);

      const firstLines = readRabbitLines(outA);
      const secondLines = readRabbitLines(outB);
      const crashing = firstLines.find((l) => l.outcome === 'crashing');
      expect(crashing?.messageId, 'the worker died in the handler of the chosen message').toBe(crashId);
      const held = heldByDead(firstLines);
      const secondHandled = secondLines.filter((l) => l.outcome === 'handled');
      const byId = new Map(secondHandled.map((l) => [l.messageId ?? '', l]));
      for (const id of held) expect(byId.get(id)?.attempt, `${id}'s attempt after the restart`).toBe(2);
      expect(byId.get(crashId)?.attempt).toBe(2);
      // What the first process never took from RabbitMQ comes on attempt 1; what it took (out, or
      // waiting in its prefetch: its concurrency, on the one queue) on attempt 2; nothing on a later one.
      expect(secondHandled.filter((l) => l.attempt === 2).length).toBeLessThanOrEqual(common.concurrency);
      expect(secondHandled.filter((l) => l.attempt > 2)).toEqual([]);
      const firstHandled = idsOf(firstLines, 'handled');
      const twice = secondHandled.filter((l) => firstHandled.has(l.messageId ?? ''));
      expect(twice.filter((l) => l.attempt !== 2)).toEqual([]);
      expect(new Set([...firstHandled, ...byId.keys()]).size).toBe(TOTAL);
      expect(await producer.deadLettered()).toEqual([]);
      console.info(
        `[rabbitmq-sigkill] restarted worker: the first handled ${firstHandled.size}, held ${held.size} begun when killed; the second handled ${secondHandled.length}, ${secondHandled.filter((l) => l.attempt === 2).length} of them on attempt 2, ${twice.length} handled twice`,
      );
    }, 60_000);
  });
});
