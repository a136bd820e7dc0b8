/**
 * Per-key order on RabbitMqBroker (DESIGN.md guarantee 4) across two worker processes
 * (fixtures/rabbitmq-worker.ts): ordered commands of one partition key are handled one at a time in
 * send order, also when some of them fail and are retried, and when one process stops mid-stream;
 * a key waiting for a retry holds up no other key, in its partition queue or another. The same
 * assertions as the ordering tests on BullMQ (redis-faults.test.ts, redis-bus.test.ts) and
 * PostgreSQL (postgres-broker-ordering.test.ts).
 */
import { join } from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { partitionOf, prepareMessage } from '../../src/extend.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { PostEntry } from './fixtures/fault-messages.js';
import {
  RABBIT_PARTITIONS,
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

const faults = useRabbitFaultTests();

const ACCOUNTS = Array.from({ length: 8 }, (_, i) => `acc-${i}`);
const PER_ACCOUNT = 25;

/** Entries that fail on their first attempt and succeed on the retry: n = 3, 10, 17, 24 of each account. */
const failsOnce = (n: number): boolean => n % 7 === 3;

/** The handled lines of `account`, in the order their handlers began. */
function ofAccount(lines: readonly RabbitWorkLine[], account: string): RabbitWorkLine[] {
  return lines
    .filter((line) => line.outcome === 'handled' && line.account === account)
    .sort((a, b) => (a.startedAt ?? 0) - (b.startedAt ?? 0));
}

/** Asserts that each handler run of `lines` began only after the one before it had finished. */
function expectOneAtATime(lines: readonly RabbitWorkLine[], label: string): void {
  for (let i = 1; i < lines.length; i++) {
    expect(lines[i]?.startedAt ?? 0, `${label} #${i + 1}`).toBeGreaterThanOrEqual(
      lines[i - 1]?.endedAt ?? Infinity,
    );
  }
}

describe('RabbitMqBroker per-key order', () => {
  describe('when two worker processes share ordered keys, some entries fail once, and one process stops mid-stream', () => {
    it('handles each key one message at a time in send order, retries in place, across the processes', async () => {
      const site = faults.freshSite(rabbitUrl, redisUrl);
      const outs = [join(site.dir, 'ordered-a.jsonl'), join(site.dir, 'ordered-b.jsonl')];
      const workers = await Promise.all(
        outs.map((outFile) =>
          faults.startWorker(site, {
            outFile,
            ordered: true,
            handleMs: 10,
            concurrency: 8,
            retryAttempts: 3,
            backoffMs: 20,
          }),
        ),
      );
      const producer = faults.producer(site);

      const now = Date.now();
      // Interleaved accounts, n = 1..25 within each.
      const messages = Array.from({ length: PER_ACCOUNT }, (_, i) =>
        ACCOUNTS.map(
          (account) =>
            prepareMessage(
              PostEntry,
              { account, n: i + 1, ...(failsOnce(i + 1) ? { failAttempts: 1 } : {}) },
              {},
              { now },
            ).outgoing,
        ),
      ).flat();
      await producer.broker.publishBatch(messages);
      const lines = (): RabbitWorkLine[] => outs.flatMap((out) => readRabbitLines(out));
      const handled = (): RabbitWorkLine[] => lines().filter((line) => line.outcome === 'handled');
      const explain = (): string => workers.map((w, i) => `worker ${i} says:\n${w.output()}`).join('\n');

      // Stop the busiest process gracefully while both are busy: the keys it held go on in the other.
      await waitFor('a third of the messages to be handled', () => handled().length >= messages.length / 3, {
        timeoutMs: 20_000,
        explain,
      });
      const busiest = outs
        .map((out, i) => ({ i, count: readRabbitLines(out).length }))
        .sort((a, b) => b.count - a.count)[0]?.i;
      const stopped = workers[busiest ?? 0];
      const stoppedAt = Date.now();
      await stopped?.stop();
      const handledIds = (): Set<string> => new Set(handled().map((line) => line.messageId ?? ''));
      await waitFor('every message to be handled', () => handledIds().size >= messages.length, {
        timeoutMs: 30_000,
        explain: () => `${handledIds().size} of ${messages.length}\n${explain()}`,
      });

      // A graceful stop must not run a message twice; today an entry the stopped process handled as
      // the stop began can come back (its ack lost as the broker closes: see
      // rabbitmq-graceful-stop.test.ts). Such a run again is counted, and left out of the order.
      const firstRuns = new Map<string, RabbitWorkLine>();
      const again: RabbitWorkLine[] = [];
      for (const line of [...handled()].sort((a, b) => (a.startedAt ?? 0) - (b.startedAt ?? 0))) {
        const first = firstRuns.get(line.messageId ?? '');
        if (first === undefined) {
          firstRuns.set(line.messageId ?? '', line);
          continue;
        }
        again.push(line);
        expect(first.pid, 'a message run twice was first run by the stopped process').toBe(stopped?.pid);
        expect(first.endedAt ?? 0, 'as the stop began').toBeGreaterThanOrEqual(stoppedAt);
      }
      const all = [...firstRuns.values()];
      expect(all).toHaveLength(messages.length);
      const handledByBoth: string[] = [];
      for (const account of ACCOUNTS) {
        const entries = ofAccount(all, account);
        expect(
          entries.map((line) => line.n),
          `${account} (${all.length} handled): ${JSON.stringify(entries.map((l) => [l.n, l.attempt, l.pid === stopped?.pid ? 'stopped' : 'other', l.startedAt, l.endedAt]))}, stopped at ${stoppedAt}`,
        ).toEqual(Array.from({ length: PER_ACCOUNT }, (_, i) => i + 1));
        expectOneAtATime(entries, account);
        // A retried entry ran on its second attempt (or its third, when the stop gave it back in
        // between: a quorum queue counts that return as an unsettled end), before the next entry.
        for (const line of entries.filter((l) => failsOnce(l.n ?? 0))) {
          expect(line.attempt, `${account} #${line.n}`).toBeGreaterThanOrEqual(2);
        }
        // An entry that never failed ran on attempt 1, or 2 when the stopped process gave it back.
        for (const line of entries.filter((l) => !failsOnce(l.n ?? 0) && l.attempt !== 1)) {
          expect(line.attempt, `${account} #${line.n}`).toBe(2);
          expect(line.pid, `${account} #${line.n} was given back by the stopped process`).not.toBe(
            stopped?.pid,
          );
          expect(line.startedAt ?? 0).toBeGreaterThanOrEqual(stoppedAt);
        }
        if (new Set(entries.map((line) => line.pid)).size > 1) handledByBoth.push(account);
      }
      expect(lines().filter((l) => l.outcome === 'dead-lettered')).toEqual([]);
      expect(handledByBoth.length, 'some key was handled by both processes').toBeGreaterThan(0);
      expect(await producer.deadLettered()).toEqual([]);
      const perWorker = workers.map((w) => all.filter((l) => l.pid === w.pid).length);
      const givenBack = all.filter((l) => !failsOnce(l.n ?? 0) && l.attempt === 2).length;
      console.info(
        `[rabbitmq-ordering] ${messages.length} messages over ${ACCOUNTS.length} keys and 2 processes (${perWorker.join(' / ')}), ${handledByBoth.length} keys handled by both, ${givenBack} entries on attempt 2 after the stop gave them back, ${again.length} handled twice across the stop`,
      );
    }, 60_000);
  });

  describe('when the first entry of a key fails twice with a long backoff', () => {
    it('handles its entries in order, retries included, without holding up other keys in its partition or another', async () => {
      const site = faults.freshSite(rabbitUrl, redisUrl);
      const outs = [join(site.dir, 'ordered-a.jsonl'), join(site.dir, 'ordered-b.jsonl')];
      // 500 ms, then 1 s: the key waits 1.5 s for its retries, far longer than the others need.
      const workers = await Promise.all(
        outs.map((outFile) =>
          faults.startWorker(site, {
            outFile,
            ordered: true,
            handleMs: 5,
            concurrency: 8,
            retryAttempts: 3,
            backoffMs: 500,
          }),
        ),
      );
      const producer = faults.producer(site);
      const slow = 'slow';
      const partition = partitionOf(slow, RABBIT_PARTITIONS);
      const keyIn = (wanted: (p: number) => boolean): string => {
        for (let i = 0; ; i++) if (wanted(partitionOf(`key-${i}`, RABBIT_PARTITIONS))) return `key-${i}`;
      };
      const samePartition = keyIn((p) => p === partition);
      const otherPartition = keyIn((p) => p !== partition);
      const now = Date.now();
      const entry = (account: string, n: number, failAttempts = 0) =>
        prepareMessage(PostEntry, { account, n, ...(failAttempts > 0 ? { failAttempts } : {}) }, {}, { now })
          .outgoing;
      const messages = [
        entry(slow, 1, 2),
        ...[2, 3, 4].map((n) => entry(slow, n)),
        ...[1, 2, 3, 4, 5].flatMap((n) => [entry(samePartition, n), entry(otherPartition, n)]),
      ];
      await producer.broker.publishBatch(messages);
      const lines = (): RabbitWorkLine[] => outs.flatMap((out) => readRabbitLines(out));
      await waitFor(
        'every entry to be handled',
        () => lines().filter((l) => l.outcome === 'handled').length >= messages.length,
        {
          timeoutMs: 20_000,
          explain: () => workers.map((w, i) => `worker ${i} says:\n${w.output()}`).join('\n'),
        },
      );

      const all = lines();
      const slowRuns = all
        .filter((l) => l.account === slow && (l.outcome === 'handled' || l.outcome === 'retrying'))
        .sort((a, b) => (a.at ?? 0) - (b.at ?? 0));
      expect(slowRuns.map((l) => `${l.outcome === 'retrying' ? '!' : ''}${l.n}@${l.attempt}`)).toEqual([
        '!1@1',
        '!1@2',
        '1@3',
        '2@1',
        '3@1',
        '4@1',
      ]);
      const slowHandled = ofAccount(all, slow);
      expectOneAtATime(slowHandled, slow);
      const firstRetry = slowRuns[0]?.at ?? 0;
      const slowDone = slowHandled[0]?.startedAt ?? 0;
      for (const key of [samePartition, otherPartition]) {
        const entries = ofAccount(all, key);
        expect(
          entries.map((l) => `${l.n}@${l.attempt}`),
          key,
        ).toEqual(['1@1', '2@1', '3@1', '4@1', '5@1']);
        expectOneAtATime(entries, key);
        // Handled while the slow key waited for its retries.
        expect(
          entries.at(-1)?.endedAt ?? Infinity,
          `${key} finished before the slow key's first entry succeeded`,
        ).toBeLessThan(slowDone);
      }
      // Not before its time: the second retry's.
      const lastRetryAt = slowRuns[1]?.retryAt ?? Infinity;
      expect(slowDone, 'the slow key waited its backoff').toBeGreaterThanOrEqual(lastRetryAt);
      expect(await producer.deadLettered()).toEqual([]);
      console.info(
        `[rabbitmq-ordering] held key: ${slow} (partition ${partition}) waited ${slowDone - firstRetry} ms for its retries; ${samePartition} (same partition) and ${otherPartition} (another) finished ${slowDone - (ofAccount(all, samePartition).at(-1)?.endedAt ?? 0)} and ${slowDone - (ofAccount(all, otherPartition).at(-1)?.endedAt ?? 0)} ms before it`,
      );
    }, 60_000);
  });
});
