/**
 * Competing consumers on RabbitMqBroker (DESIGN.md guarantees 1 and 3): two worker processes
 * (fixtures/rabbitmq-worker.ts) take the messages of one endpoint from the same quorum queues while
 * 1 % of the messages fail on every attempt. Each worker appends one line per handled message to a
 * file of its own; the test counts them per message. RabbitMQ has no publish dedupe, so a message
 * may be handled twice (a delivery whose ack was lost); the test counts those and reports them.
 */
import { join } from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { OutgoingMessage } from '../../src/extend.js';
import { prepareMessage } from '../../src/extend.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { DoWork, HANDLER_OF, WorkRequested } from './fixtures/fault-messages.js';
import {
  keyOf,
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

const TOTAL = 10_000;
const BATCH = 500;
const ATTEMPTS = 3;

function expectedKey(message: OutgoingMessage): string {
  return keyOf(message.kind === 'event' ? HANDLER_OF.event : HANDLER_OF.command, message.id);
}

/** How many times each (handler, message) was handled, over the lines of every worker. */
function handledCounts(lines: readonly RabbitWorkLine[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of lines) {
    if (line.outcome !== 'handled') continue;
    const key = keyOf(line.handler, line.messageId);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

const faults = useRabbitFaultTests();

describe('RabbitMqBroker competing consumers', () => {
  describe('when two worker processes take 10,000 messages of one endpoint, 1 % failing on every attempt', () => {
    it('loses none: every good message handled, every failing one dead-lettered as handler-failed after 3 attempts', async () => {
      const site = faults.freshSite(rabbitUrl, redisUrl);
      const outA = join(site.dir, 'worker-a.jsonl');
      const outB = join(site.dir, 'worker-b.jsonl');
      const settings = { concurrency: 16, retryAttempts: ATTEMPTS, backoffMs: 20 };
      // Both started (their queues declared) before anything is published.
      const [workerA, workerB] = await Promise.all([
        faults.startWorker(site, { ...settings, outFile: outA }),
        faults.startWorker(site, { ...settings, outFile: outB }),
      ]);
      const producer = faults.producer(site);

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

      const lines = (): RabbitWorkLine[] => [...readRabbitLines(outA), ...readRabbitLines(outB)];
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
          timeoutMs: 40_000,
          explain: () =>
            `${done} of ${expected.size} done; A says:\n${workerA.output()}\nB says:\n${workerB.output()}`,
        },
      );
      const handleMs = Date.now() - publishStarted;

      const all = lines();
      const counts = handledCounts(all);
      const twice = [...counts].filter(([, count]) => count > 1).map(([key]) => key);
      const stored = await producer.deadLettered();
      const byA = readRabbitLines(outA).filter((l) => l.outcome === 'handled').length;
      const byB = readRabbitLines(outB).filter((l) => l.outcome === 'handled').length;

      expect([...counts.keys()].sort(), 'the good messages handled').toEqual(
        [...expected].filter((key) => !failing.has(key)).sort(),
      );
      expect(
        stored.map((r) => keyOf(r.handler, r.messageId)).sort(),
        'the failing ones dead-lettered',
      ).toEqual([...failing].sort());
      expect(new Set(stored.map((r) => r.reason))).toEqual(new Set(['handler-failed']));
      expect(new Set(stored.map((r) => r.attemptCount))).toEqual(new Set([ATTEMPTS]));
      // Each failing message went through its attempts once, and nothing else failed.
      expect(all.filter((l) => l.outcome === 'dead-lettered')).toHaveLength(failing.size);
      expect(
        all.filter((l) => l.outcome === 'retrying' && !failing.has(keyOf(l.handler, l.messageId))),
        'good messages retried',
      ).toEqual([]);
      // No worker died and no ack was lost: nothing came back, every good message ran on attempt 1.
      expect(
        all.filter((l) => l.outcome === 'handled' && l.attempt !== 1),
        'handled on a later attempt',
      ).toEqual([]);
      expect(twice, 'handled twice').toEqual([]);
      expect(byA, 'worker A handled a share').toBeGreaterThan(0);
      expect(byB, 'worker B handled a share').toBeGreaterThan(0);
      console.info(
        `[rabbitmq-competing] ${TOTAL} messages published in ${publishMs} ms, all settled after ${handleMs} ms: A handled ${byA}, B ${byB}, ${stored.length} dead-lettered, ${twice.length} handled twice`,
      );
    }, 60_000);
  });
});
