/**
 * Competing consumers on PostgresBroker (DESIGN.md guarantees 1 and 3): two worker processes
 * (fixtures/pg-broker-worker.ts) take the messages of one endpoint from the same tables, with no
 * inbox to hide a second delivery, while 1 % of the messages fail on every attempt. Each worker
 * appends one line per handled message to a file of its own; the test counts them per message.
 */
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import type { OutgoingMessage } from '../../src/extend.js';
import { prepareMessage } from '../../src/extend.js';
import { useSharedPostgres } from '../helpers/postgres.js';
import { DoWork, HANDLER_OF, WorkRequested } from './fixtures/fault-messages.js';
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

const TOTAL = 10_000;
const BATCH = 500;

/** One delivery of one message to one handler: what "handled" and "dead-lettered" are counted by. */
function keyOf(handler: string | undefined, messageId: string | undefined): string {
  return `${handler ?? '?'}/${messageId ?? '?'}`;
}

function expectedKey(message: OutgoingMessage): string {
  return keyOf(message.kind === 'event' ? HANDLER_OF.event : HANDLER_OF.command, message.id);
}

/** How many times each (handler, message) was handled, over the lines of every worker. */
function handledCounts(lines: readonly PgWorkLine[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of lines) {
    if (line.outcome !== 'handled') continue;
    const key = keyOf(line.handler, line.messageId);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

const { cleanups, freshSite } = usePgFaultTests(databaseUrl, pool);

describe('PostgresBroker competing consumers', () => {
  describe('when two worker processes take 10,000 messages of one endpoint, 1 % failing on every attempt', () => {
    it('hands each message to one worker once: 0 lost, 0 handled twice, the failures dead-lettered as handler-failed after 3 attempts', async () => {
      const { site, dir } = await freshSite();
      const outA = join(dir, 'worker-a.jsonl');
      const outB = join(dir, 'worker-b.jsonl');
      const settings = { site, concurrency: 16, retryAttempts: 3 };
      // Both started (their subscriptions registered) before anything is published.
      const [workerA, workerB] = await Promise.all([
        startPgWorker({ ...settings, outFile: outA }),
        startPgWorker({ ...settings, outFile: outB }),
      ]);
      const producer = createPgProducer(site);
      cleanups.push(() => producer.close());

      const now = Date.now();
      const messages = Array.from({ length: TOTAL }, (_, n) => {
        const payload = { n, ...(n % 100 === 0 ? { failAttempts: 99 } : {}) };
        return prepareMessage(n % 2 === 0 ? DoWork : WorkRequested, payload, {}, { now }).outgoing;
      });
      const failing = new Set(messages.filter((_, n) => n % 100 === 0).map(expectedKey));
      const expected = new Set(messages.map(expectedKey));
      const publishStarted = Date.now();
      for (let from = 0; from < TOTAL; from += BATCH) {
        await producer.broker.publishBatch(messages.slice(from, from + BATCH));
      }
      const publishMs = Date.now() - publishStarted;

      const lines = (): PgWorkLine[] => [...readPgLines(outA), ...readPgLines(outB)];
      let done = 0;
      await waitFor(
        'every message to be handled or dead-lettered',
        () => {
          const all = lines();
          const covered = new Set([
            ...handledCounts(all).keys(),
            ...all.filter((l) => l.outcome === 'dead-lettered').map((l) => keyOf(l.handler, l.messageId)),
          ]);
          done = covered.size;
          return [...expected].every((key) => covered.has(key));
        },
        {
          timeoutMs: 45_000,
          explain: () =>
            `${done} of ${expected.size} done; A says:\n${workerA.output()}\nB says:\n${workerB.output()}`,
        },
      );
      const handleMs = Date.now() - publishStarted;

      const all = lines();
      const counts = handledCounts(all);
      const twice = [...counts].filter(([, count]) => count > 1).map(([key]) => key);
      const stored = await producer.deadLettered();
      const byA = readPgLines(outA).filter((l) => l.outcome === 'handled').length;
      const byB = readPgLines(outB).filter((l) => l.outcome === 'handled').length;

      expect(twice, 'handled twice').toEqual([]);
      expect([...counts.keys()].sort()).toEqual([...expected].filter((key) => !failing.has(key)).sort());
      expect(stored.map((r) => keyOf(r.handler, r.messageId)).sort()).toEqual([...failing].sort());
      expect(new Set(stored.map((r) => r.reason))).toEqual(new Set(['handler-failed']));
      expect(new Set(stored.map((r) => r.attemptCount))).toEqual(new Set([3]));
      // Each failing message went through its three attempts, and nothing else failed.
      expect(all.filter((l) => l.outcome === 'dead-lettered')).toHaveLength(failing.size);
      expect(byA, 'worker A handled a share').toBeGreaterThan(0);
      expect(byB, 'worker B handled a share').toBeGreaterThan(0);
      console.info(
        `[postgres-broker-competing] ${TOTAL} messages published in ${publishMs} ms, all settled after ${handleMs} ms: A handled ${byA}, B ${byB}, ${stored.length} dead-lettered, ${twice.length} handled twice`,
      );
    }, 60_000);
  });
});
