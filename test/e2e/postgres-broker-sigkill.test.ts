/**
 * Worker processes on PostgresBroker killed with SIGKILL (DESIGN.md guarantees 1 and 10): the
 * deliveries a dead process held come back once their lease (`leaseMs`, 2 s here) runs out, and
 * with the inbox on (`postgresUnitOfWork`) every message's effects are applied once, also when the
 * process died between its handler's commit and the ack. The workers (fixtures/pg-broker-worker.ts)
 * insert one `effects` row per message in the handler's transaction and kill themselves at a chosen
 * message, so the kill lands exactly where the test wants it.
 */
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { prepareMessage, type OutgoingMessage } from '../../src/extend.js';
import { useSharedPostgres } from '../helpers/postgres.js';
import { DoWork } from './fixtures/fault-messages.js';
import {
  createPgProducer,
  effectCounts,
  readPgLines,
  startPgWorker,
  waitFor,
  type PgFaultSite,
  type PgProducer,
  type PgWorkLine,
} from './fixtures/pg-broker-harness.js';
import { usePgFaultTests } from './fixtures/pg-fault-tests.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const LEASE_MS = 2_000;
/**
 * How long after the lease ran out the other worker may take to pick a delivery up: its poll or
 * notification, the handler, and a renewal the dead process made just before it died.
 */
const PICK_UP_SLACK_MS = 2_000;
const TOTAL = 300;
const CRASH_AT = 150;

const { cleanups, freshSite } = usePgFaultTests(databaseUrl, pool);

interface Scene {
  readonly site: PgFaultSite;
  readonly dir: string;
  readonly producer: PgProducer;
}

async function setUp(): Promise<Scene> {
  const { site, dir } = await freshSite();
  return { site, dir, producer: createPgProducer(site) };
}

function workMessages(count: number): OutgoingMessage[] {
  const now = Date.now();
  return Array.from({ length: count }, (_, n) => prepareMessage(DoWork, { n }, {}, { now }).outgoing);
}

/** Waits until every message has its effect row, and returns the counts per message id. */
async function waitForEveryEffect(
  scene: Scene,
  messages: readonly OutgoingMessage[],
  explain: () => string,
): Promise<Map<string, number>> {
  let counts = new Map<string, number>();
  await waitFor(
    'every message to have its effect row',
    async () => {
      counts = await effectCounts(pool, scene.site.schema);
      return messages.every((m) => counts.has(m.id));
    },
    { timeoutMs: 30_000, explain: () => `${counts.size} of ${messages.length} applied\n${explain()}` },
  );
  return counts;
}

describe('PostgresBroker with a worker killed by SIGKILL', () => {
  describe('when the worker dies mid-handler, its transaction open', () => {
    it('gives its deliveries to the other worker once the lease runs out, and the inbox applies each message once', async () => {
      const scene = await setUp();
      cleanups.push(() => scene.producer.close());
      const outA = join(scene.dir, 'worker-a.jsonl');
      const outB = join(scene.dir, 'worker-b.jsonl');
      const common = { site: scene.site, leaseMs: LEASE_MS, inbox: true, recordStarts: true, handleMs: 20 };
      const workerA = await startPgWorker({
        ...common,
        outFile: outA,
        crash: { atN: CRASH_AT, mode: 'mid-handler' },
      });
      // B is loaded now and started the moment A is gone, so the lease alone decides when A's
      // deliveries come back.
      const workerB = await startPgWorker({ ...common, outFile: outB, startOnSignal: true });
      const messages = workMessages(TOTAL);
      await scene.producer.broker.publishBatch(messages);

      await workerA.exited();
      await workerB.go();
      const counts = await waitForEveryEffect(
        scene,
        messages,
        () => `A says:\n${workerA.output()}\nB says:\n${workerB.output()}`,
      );

      const linesA = readPgLines(outA);
      const linesB = readPgLines(outB);
      const crashing = linesA.find((l) => l.outcome === 'crashing');
      expect(crashing?.n, 'A killed itself in the handler of the chosen message').toBe(CRASH_AT);
      const crashedAt = crashing?.crashedAt ?? 0;
      const committedByA = new Set(
        (
          await pool.query<{ message_id: string }>(
            `SELECT message_id FROM "${scene.site.schema}".effects WHERE pid = $1`,
            [workerA.pid],
          )
        ).rows.map((r) => r.message_id),
      );
      // What A had begun and not committed when it died: the deliveries it held.
      const heldByA = new Set(
        linesA
          .filter((l) => l.outcome === 'started' && !committedByA.has(l.messageId ?? ''))
          .map((l) => l.messageId ?? ''),
      );
      const firstStartInB = new Map<string, PgWorkLine>();
      for (const line of linesB) {
        if (line.outcome === 'started' && !firstStartInB.has(line.messageId ?? '')) {
          firstStartInB.set(line.messageId ?? '', line);
        }
      }
      const comeBack = [...heldByA].map((id) => firstStartInB.get(id));
      const latestComeBack = Math.max(...comeBack.map((l) => (l?.startedAt ?? Infinity) - crashedAt));
      const earliestComeBack = Math.min(...comeBack.map((l) => (l?.startedAt ?? -Infinity) - crashedAt));

      expect(heldByA.size, 'A held deliveries when it died').toBeGreaterThan(0);
      expect(
        comeBack.every((l) => l !== undefined),
        'every delivery A held came back to B',
      ).toBe(true);
      expect(latestComeBack, 'ms from the kill to the last of them starting in B').toBeLessThanOrEqual(
        LEASE_MS + PICK_UP_SLACK_MS,
      );
      // Not before the lease ran out: the dead process renewed it at most a third of leaseMs before it died.
      expect(earliestComeBack, 'ms from the kill to the first of them starting in B').toBeGreaterThanOrEqual(
        (2 * LEASE_MS) / 3,
      );
      // The attempt that died counts (DESIGN.md: a delivery taken and never settled is an attempt).
      expect(firstStartInB.get(messages[CRASH_AT]?.id ?? '')?.attempt).toBe(2);
      expect(
        [...counts.values()].filter((count) => count !== 1),
        'messages applied twice',
      ).toEqual([]);
      expect(counts.size).toBe(TOTAL);
      expect(await scene.producer.deadLettered()).toEqual([]);
      console.info(
        `[postgres-broker-sigkill] mid-handler: A committed ${committedByA.size}, held ${heldByA.size} when killed; they started in B ${Math.round(latestComeBack)} ms after the kill at most (lease ${LEASE_MS} ms, B ready ${String((workerB.readyAt ?? 0) - crashedAt)} ms after the kill)`,
      );
    }, 60_000);
  });

  describe('when the worker dies after its handler committed and before the ack', () => {
    it('delivers the message again and the inbox skips it: its effects applied once', async () => {
      const scene = await setUp();
      cleanups.push(() => scene.producer.close());
      const outA = join(scene.dir, 'worker-a.jsonl');
      const outB = join(scene.dir, 'worker-b.jsonl');
      const common = { site: scene.site, leaseMs: LEASE_MS, inbox: true, handleMs: 5 };
      const workerA = await startPgWorker({
        ...common,
        outFile: outA,
        crash: { atN: CRASH_AT, mode: 'after-commit' },
      });
      const workerB = await startPgWorker({ ...common, outFile: outB, startOnSignal: true });
      const messages = workMessages(TOTAL);
      const crashId = messages[CRASH_AT]?.id ?? '';
      await scene.producer.broker.publishBatch(messages);

      await workerA.exited();
      await workerB.go();
      let skipped: PgWorkLine | undefined;
      await waitFor(
        'B to receive the message A committed and skip it',
        () => {
          skipped = readPgLines(outB).find((l) => l.outcome === 'skipped' && l.messageId === crashId);
          return skipped !== undefined;
        },
        { timeoutMs: 20_000, explain: () => `A says:\n${workerA.output()}\nB says:\n${workerB.output()}` },
      );
      const counts = await waitForEveryEffect(
        scene,
        messages,
        () => `A says:\n${workerA.output()}\nB says:\n${workerB.output()}`,
      );

      const crashing = readPgLines(outA).find((l) => l.outcome === 'crashing');
      expect(crashing?.messageId, 'A killed itself right after committing the chosen message').toBe(crashId);
      const crashRow = await pool.query<{ pid: number }>(
        `SELECT pid FROM "${scene.site.schema}".effects WHERE message_id = $1`,
        [crashId],
      );
      expect(
        crashRow.rows.map((r) => r.pid),
        'its one effect row is the one A committed',
      ).toEqual([workerA.pid]);
      expect(
        readPgLines(outB).filter((l) => l.outcome === 'handled' && l.messageId === crashId),
        'B never ran its handler',
      ).toEqual([]);
      expect((skipped?.at ?? Infinity) - (crashing?.crashedAt ?? 0)).toBeLessThanOrEqual(
        LEASE_MS + PICK_UP_SLACK_MS,
      );
      expect(
        [...counts.values()].filter((count) => count !== 1),
        'messages applied twice',
      ).toEqual([]);
      expect(counts.size).toBe(TOTAL);
      expect(await scene.producer.deadLettered()).toEqual([]);
    }, 60_000);
  });

  describe('when a handler runs longer than the lease', () => {
    it('keeps its delivery by renewing the lease: the other worker never receives it', async () => {
      const scene = await setUp();
      cleanups.push(() => scene.producer.close());
      const outA = join(scene.dir, 'worker-a.jsonl');
      const outB = join(scene.dir, 'worker-b.jsonl');
      const handleMs = 3 * LEASE_MS;
      const common = { site: scene.site, leaseMs: LEASE_MS, recordStarts: true, handleMs, concurrency: 2 };
      const [workerA, workerB] = await Promise.all([
        startPgWorker({ ...common, outFile: outA }),
        startPgWorker({ ...common, outFile: outB }),
      ]);
      const messages = workMessages(4);
      await scene.producer.broker.publishBatch(messages);

      const lines = (): PgWorkLine[] => [...readPgLines(outA), ...readPgLines(outB)];
      await waitFor(
        'the four messages to be handled',
        () => lines().filter((l) => l.outcome === 'handled').length >= messages.length,
        { timeoutMs: 30_000, explain: () => `A says:\n${workerA.output()}\nB says:\n${workerB.output()}` },
      );

      const starts = lines().filter((l) => l.outcome === 'started');
      expect(starts.map((l) => l.messageId).sort(), 'each message started once').toEqual(
        messages.map((m) => m.id).sort(),
      );
      const handled = lines().filter((l) => l.outcome === 'handled');
      expect(handled.every((l) => (l.endedAt ?? 0) - (l.startedAt ?? 0) >= handleMs)).toBe(true);
      expect(handled.map((l) => l.messageId).sort()).toEqual(messages.map((m) => m.id).sort());
    }, 60_000);
  });
});
