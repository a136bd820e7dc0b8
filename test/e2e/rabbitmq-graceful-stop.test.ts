/**
 * A graceful stop of a worker on RabbitMqBroker (DESIGN.md guarantee 6): SIGTERM lets the handlers
 * in flight finish, and what they handled is acked for good, so the next worker never gets it
 * again. The worker (fixtures/rabbitmq-worker.ts) is stopped while a slow handler runs for an
 * unordered command and one for an ordered one; once it has exited, a marker is published behind
 * each, and a second worker handles the queues: a message that came back would reach it before its
 * marker (RabbitMQ delivers what returns to a queue before what waits in it).
 */
import { join } from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { prepareMessage } from '../../src/extend.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { DoWork, PostEntry } from './fixtures/fault-messages.js';
import { readRabbitLines, useRabbitFaultTests, waitFor } from './fixtures/rabbitmq-harness.js';

const redisUrl = inject('redisUrl');
let rabbitUrl: string;

beforeAll(async () => {
  rabbitUrl = await rabbitmqUrl();
}, 60_000);

const faults = useRabbitFaultTests();

describe('RabbitMqBroker with a worker stopped gracefully', () => {
  describe('when handlers are running as SIGTERM arrives', () => {
    // Failed before the broker's close waited for the channel close its receiver had begun: the
    // connection closed before the channel's close-ok, and RabbitMQ dropped the acks sent just before.
    it('lets them finish and acks what they handled: the next worker never gets those messages again', async () => {
      const site = faults.freshSite(rabbitUrl, redisUrl);
      const outA = join(site.dir, 'worker-a.jsonl');
      const outB = join(site.dir, 'worker-b.jsonl');
      const common = { recordStarts: true, ordered: true, handleMs: 500, concurrency: 8 };
      const first = await faults.startWorker(site, { ...common, outFile: outA });
      const producer = faults.producer(site);
      const now = Date.now();
      const running = [
        prepareMessage(DoWork, { n: 1 }, {}, { now }).outgoing,
        prepareMessage(PostEntry, { account: 'acc', n: 1 }, {}, { now }).outgoing,
      ];
      await producer.broker.publishBatch(running);
      await waitFor(
        'both handlers to be running',
        () => readRabbitLines(outA).filter((l) => l.outcome === 'started').length === running.length,
        { timeoutMs: 15_000, explain: () => first.output() },
      );
      await first.stop();
      expect(first.child.exitCode, `the worker stopped cleanly:\n${first.output()}`).toBe(0);
      expect(
        readRabbitLines(outA)
          .filter((l) => l.outcome === 'handled')
          .map((l) => l.messageId)
          .sort(),
        'the handlers finished within the grace period',
      ).toEqual(running.map((m) => m.id).sort());

      const markers = [
        prepareMessage(DoWork, { n: 2 }, {}, { now }).outgoing,
        prepareMessage(PostEntry, { account: 'acc', n: 2 }, {}, { now }).outgoing,
      ];
      await producer.broker.publishBatch(markers);
      const second = await faults.startWorker(site, { ...common, handleMs: 0, outFile: outB });
      await waitFor(
        'the second worker to handle the markers',
        () => {
          const handled = new Set(readRabbitLines(outB).map((l) => l.messageId));
          return markers.every((m) => handled.has(m.id));
        },
        { timeoutMs: 15_000, explain: () => second.output() },
      );
      expect(
        readRabbitLines(outB)
          .filter((l) => l.outcome === 'handled' && running.some((m) => m.id === l.messageId))
          .map((l) => `${l.type ?? ''} n=${l.n ?? ''} attempt ${l.attempt}`),
        'messages the stopped worker had handled, handled again',
      ).toEqual([]);
    }, 60_000);
  });
});
