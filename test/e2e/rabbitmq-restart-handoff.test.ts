/**
 * RabbitMqBroker with a delivery ledger through a RabbitMQ restart, where the messages one process
 * held come back to another (DESIGN.md guarantee 11): process A holds messages in slow handlers,
 * RabbitMQ is stopped, A records them as lost in an outage on their ledger entries and is then
 * killed, RabbitMQ starts again, and process B takes what RabbitMQ returns. The quorum queues count
 * those returns (`x-delivery-count`), yet B must run every message on attempt 1: the outage spent
 * no attempt, and nothing is dead-lettered. Without the ledger's record, B saw attempt 2 or 3.
 */
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { uuidv7 } from '../../src/index.js';
import { startRabbitMqServer } from '../helpers/local-rabbitmq.js';
import { DoWork, WorkRequested } from './fixtures/fault-messages.js';
import {
  ledgerOf,
  readRabbitLines,
  useRabbitFaultTests,
  waitFor,
  type RabbitWorker,
  type RabbitWorkLine,
} from './fixtures/rabbitmq-harness.js';

const redisUrl = inject('redisUrl');
const faults = useRabbitFaultTests({ scope: 'file' });

/**
 * Messages A holds when RabbitMQ stops, half commands, half events: half of them in its handlers,
 * the others waiting in its receiver for a free handler (taken from RabbitMQ, not admitted by the
 * ledger yet).
 */
const HELD = 8;

describe('RabbitMqBroker with a delivery ledger, outages', () => {
  describe('when RabbitMQ restarts while one process holds messages and another takes them back', () => {
    const ids: string[] = [];
    let linesOfB: RabbitWorkLine[] = [];
    let workers: RabbitWorker[] = [];
    let deadLettered: unknown[] = [];
    /** The messages whose loss A recorded before it was killed. */
    let recorded = 0;
    let redis: Redis | undefined;

    beforeAll(async () => {
      const server = await startRabbitMqServer('harrier-rmq-handoff-');
      faults.cleanups.push(() => server.dispose());
      const site = faults.freshSite(server.url, redisUrl);
      const [outA, outB] = [join(site.dir, 'worker-a.jsonl'), join(site.dir, 'worker-b.jsonl')];
      // A's handlers outlast the test: what A takes, it holds until RabbitMQ goes away.
      const a = await faults.startWorker(site, {
        outFile: outA,
        handleMs: 600_000,
        recordStarts: true,
        concurrency: HELD / 2,
        retryAttempts: 8,
        ledger: true,
      });
      const b = await faults.startWorker(site, {
        outFile: outB,
        handleMs: 20,
        concurrency: HELD,
        retryAttempts: 8,
        ledger: true,
        startOnSignal: true,
      });
      workers = [a, b];
      const producer = faults.producer(site, { ledger: ledgerOf(faults, site) });
      for (let n = 0; n < HELD; n++) {
        const id = uuidv7();
        ids.push(id);
        if (n % 2 === 0) await producer.bus.send(DoWork, { n }, { id });
        else await producer.bus.publish(WorkRequested, { n }, { id });
      }
      await waitFor(
        `A to fill its ${HELD / 2} handlers`,
        () => new Set(readRabbitLines(outA).map((l) => l.messageId)).size === HELD / 2,
        { timeoutMs: 15_000, explain: () => a.output() },
      );

      await server.stop();
      // A records what it held on the ledger entries (one hash per message id; `l|` a loss). Not
      // asserted here: a broker that records nothing fails the attempts below.
      const client = new Redis(redisUrl);
      redis = client;
      await waitFor(
        'A to record its messages as lost in the outage',
        async () => {
          const entries = await Promise.all(
            ids.map((id) => client.hkeys(`${site.deadLetterPrefix}:ledger:${id}`)),
          );
          recorded = entries.filter((fields) => fields.some((field) => field.startsWith('l|'))).length;
          return recorded === HELD;
        },
        { timeoutMs: 5_000 },
      ).catch(() => undefined);
      // A's process goes: what RabbitMQ returns can only go to B.
      process.kill(a.pid, 'SIGKILL');
      await a.exited();
      await server.restart();
      await b.go();

      await waitFor(
        `B to handle all ${HELD} messages`,
        () => readRabbitLines(outB).filter((l) => l.outcome === 'handled').length >= HELD,
        { timeoutMs: 20_000, explain: () => b.output() },
      );
      linesOfB = readRabbitLines(outB);
      deadLettered = await producer.deadLettered();
    }, 60_000);

    afterAll(() => {
      redis?.disconnect();
    });

    it('A recorded every message it held, in its handlers or waiting for one, as lost in the outage', () => {
      expect(recorded).toBe(HELD);
    });

    it('B runs every message A held, each on attempt 1', () => {
      const handled = linesOfB.filter((l) => l.outcome === 'handled');
      expect(new Set(handled.map((l) => l.messageId))).toEqual(new Set(ids));
      expect(
        handled.filter((l) => l.attempt !== 1),
        `B's lines:\n${linesOfB.map((l) => JSON.stringify(l)).join('\n')}\nB says:\n${workers[1]?.output() ?? ''}`,
      ).toEqual([]);
    });

    it('dead-letters nothing', () => {
      expect(linesOfB.filter((l) => l.outcome === 'dead-lettered')).toEqual([]);
      expect(deadLettered).toEqual([]);
    });
  });
});
