/**
 * Per-key order on PostgresBroker (DESIGN.md guarantee 4) across four worker processes
 * (fixtures/pg-broker-worker.ts): ordered commands of one partition key are handled one at a time in
 * send order, also when some of them fail once and are retried, and when one process stops
 * mid-stream. The same assertions as the BullMQ ordering test in redis-faults.test.ts.
 */
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { prepareMessage } from '../../src/extend.js';
import { useSharedPostgres } from '../helpers/postgres.js';
import { PostEntry } from './fixtures/fault-messages.js';
import {
  createPgProducer,
  readPgLines,
  startPgWorker,
  waitFor,
  type PgWorkLine,
} from './fixtures/pg-broker-harness.js';
import { usePgFaultTests } from './fixtures/pg-fault-tests.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const WORKERS = 4;
const ACCOUNTS = Array.from({ length: 8 }, (_, i) => `acc-${i}`);
const PER_ACCOUNT = 25;

/** Entries that fail on their first attempt and succeed on the retry: n = 3, 10, 17, 24 of each account. */
const failsOnce = (n: number): boolean => n % 7 === 3;

const { cleanups, freshSite } = usePgFaultTests(databaseUrl, pool);

describe('PostgresBroker per-key order', () => {
  describe('when four worker processes share ordered keys, some entries fail once, and one process stops mid-stream', () => {
    it('handles each key one message at a time in send order, retries in place, across the processes', async () => {
      const { site, dir } = await freshSite();
      const outs = Array.from({ length: WORKERS }, (_, i) => join(dir, `ordered-${i}.jsonl`));
      const workers = await Promise.all(
        outs.map((outFile) =>
          startPgWorker({ site, outFile, ordered: true, handleMs: 10, concurrency: 8, retryAttempts: 3 }),
        ),
      );
      const producer = createPgProducer(site);
      cleanups.push(() => producer.close());

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
      const handled = (): PgWorkLine[] =>
        outs.flatMap((out) => readPgLines(out)).filter((line) => line.outcome === 'handled');
      const explain = (): string => workers.map((w, i) => `worker ${i} says:\n${w.output()}`).join('\n');

      // Stop the busiest process gracefully while all are busy: the keys it held go on elsewhere.
      await waitFor('a third of the messages to be handled', () => handled().length >= messages.length / 3, {
        timeoutMs: 20_000,
        explain,
      });
      const busiest = outs
        .map((out, i) => ({ i, count: readPgLines(out).length }))
        .sort((a, b) => b.count - a.count)[0]?.i;
      await workers[busiest ?? 0]?.kill('SIGTERM');
      await waitFor('every message to be handled', () => handled().length >= messages.length, {
        timeoutMs: 30_000,
        explain: () => `${handled().length} of ${messages.length}\n${explain()}`,
      });

      const lines = handled();
      expect(lines).toHaveLength(messages.length);
      const handledByMany: string[] = [];
      for (const account of ACCOUNTS) {
        const ofAccount = lines
          .filter((line) => line.account === account)
          .sort((a, b) => (a.startedAt ?? 0) - (b.startedAt ?? 0));
        expect(
          ofAccount.map((line) => line.n),
          account,
        ).toEqual(Array.from({ length: PER_ACCOUNT }, (_, i) => i + 1));
        // One at a time: each message of the key began only after the one before it had finished.
        for (let i = 1; i < ofAccount.length; i++) {
          expect(ofAccount[i]?.startedAt ?? 0, `${account} #${i + 1}`).toBeGreaterThanOrEqual(
            ofAccount[i - 1]?.endedAt ?? Infinity,
          );
        }
        // A retried entry ran on its second attempt, before the next entry of its key.
        expect(
          ofAccount.filter((line) => failsOnce(line.n ?? 0)).map((line) => line.attempt),
          `${account}: attempts of the entries that failed once`,
        ).toEqual(ofAccount.filter((line) => failsOnce(line.n ?? 0)).map(() => 2));
        expect(ofAccount.filter((line) => !failsOnce(line.n ?? 0)).every((line) => line.attempt === 1)).toBe(
          true,
        );
        if (new Set(ofAccount.map((line) => line.pid)).size > 1) handledByMany.push(account);
      }
      expect(handledByMany.length, 'some key was handled by more than one process').toBeGreaterThan(0);
      expect(await producer.deadLettered()).toEqual([]);
      const perWorker = workers.map((w) => lines.filter((l) => l.pid === w.pid).length);
      console.info(
        `[postgres-broker-ordering] ${messages.length} messages over ${ACCOUNTS.length} keys and ${WORKERS} processes (${perWorker.join(' / ')}), ${handledByMany.length} keys handled by more than one process`,
      );
    }, 60_000);
  });
});
