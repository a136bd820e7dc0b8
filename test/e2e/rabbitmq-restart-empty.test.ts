/**
 * RabbitMqBroker when RabbitMQ comes back without its data (a replaced server, a lost volume): the
 * workers reconnect and must declare their endpoint's queues, exchanges and bindings again, so the
 * endpoint takes messages again without a restart of its processes. Messages stored in the lost data
 * are gone with it; what is published after the server is back must be handled.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { HarrierError, uuidv7 } from '../../src/index.js';
import { startRabbitMqServer } from '../helpers/local-rabbitmq.js';
import { DoWork, HANDLER_OF, WorkRequested } from './fixtures/fault-messages.js';
import { keyOf, readRabbitLines, useRabbitFaultTests, waitFor } from './fixtures/rabbitmq-harness.js';

const redisUrl = inject('redisUrl');
const faults = useRabbitFaultTests();
const EACH = 20;

describe('RabbitMqBroker outages', () => {
  describe('when RabbitMQ comes back empty, its data lost', () => {
    it('declares the topology again: the same worker process handles what is published after', async () => {
      const server = await startRabbitMqServer('harrier-rmq-empty-');
      faults.cleanups.push(() => server.dispose());
      const site = faults.freshSite(server.url, redisUrl);
      const outFile = join(site.dir, 'worker.jsonl');
      const worker = await faults.startWorker(site, { outFile, concurrency: 8 });
      const producer = faults.producer(site, { publishTimeoutMs: 1_000 });
      const refusals = new Map<string, number>();
      const publishRange = async (from: number, to: number): Promise<string[]> => {
        const keys: string[] = [];
        for (let n = from; n < to; n++) {
          const id = uuidv7();
          await waitFor(
            `publish ${n} to be accepted`,
            async () => {
              try {
                if (n % 2 === 0) await producer.bus.send(DoWork, { n }, { id });
                else await producer.bus.publish(WorkRequested, { n }, { id });
                return true;
              } catch (error) {
                const code = HarrierError.is(error) ? error.code : String(error);
                refusals.set(code, (refusals.get(code) ?? 0) + 1);
                return false;
              }
            },
            {
              timeoutMs: 30_000,
              explain: () => `refusals: ${JSON.stringify([...refusals])}\n${worker.output()}`,
            },
          );
          keys.push(keyOf(n % 2 === 0 ? HANDLER_OF.command : HANDLER_OF.event, id));
        }
        return keys;
      };
      const handled = (): Set<string> =>
        new Set(
          readRabbitLines(outFile)
            .filter((l) => l.outcome === 'handled')
            .map((l) => keyOf(l.handler, l.messageId)),
        );
      const before = await publishRange(0, EACH);
      await waitFor('the first messages to be handled', () => before.every((k) => handled().has(k)), {
        timeoutMs: 15_000,
        explain: () => worker.output(),
      });

      await server.stop();
      rmSync(join(server.dir, 'mnesia'), { recursive: true, force: true });
      await server.restart();
      const after = await publishRange(EACH, 2 * EACH);
      await waitFor(
        'the messages published after to be handled',
        () => after.every((k) => handled().has(k)),
        {
          timeoutMs: 30_000,
          explain: () =>
            `${after.filter((k) => handled().has(k)).length} of ${after.length}; the worker says:\n${worker.output().slice(-3_000)}`,
        },
      );
      expect(worker.running, 'the same worker process').toBe(true);
      console.info(
        `[rabbitmq-restart-empty] refusals while the topology was missing: ${JSON.stringify([...refusals])}`,
      );
    }, 60_000);
  });
});
