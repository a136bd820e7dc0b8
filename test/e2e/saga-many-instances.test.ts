/**
 * One saga, 1,000 instances, two worker processes on Redis (DESIGN.md guarantee 9): every
 * instance's four parts are published in random order and twice with the same id, and some are
 * handed to the saga's subscription again after their first delivery was handled (a distinct
 * delivery of the same message). Every instance must end with each part applied once, and each
 * message the saga published must reach each subscription once.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { sagaStateOf, type SagaSummary } from '../../src/index.js';
import { prepareMessage, type OutgoingMessage } from '../../src/extend.js';
import { waitFor } from '../helpers/local-redis.js';
import {
  jobsLeft,
  openSagaSystem,
  readSagaLines,
  startSagaWorker,
  type SagaSystem,
} from './fixtures/saga-harness.js';
import {
  PART_AMOUNTS,
  PARTS,
  PartAcknowledged,
  PartArrived,
  TallyCompleted,
  type Part,
  type TallyState,
} from './fixtures/saga-messages.js';

const redisUrl = inject('redisUrl');
const INSTANCES = 1_000;
const RESENT = 300;
const FULL_TOTAL = Object.values(PART_AMOUNTS).reduce((sum, amount) => sum + amount, 0);

function shuffled<T>(values: readonly T[]): T[] {
  const out = [...values];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

async function inBatches(
  messages: readonly OutgoingMessage[],
  publish: (batch: OutgoingMessage[]) => Promise<void>,
) {
  for (let i = 0; i < messages.length; i += 250) await publish(messages.slice(i, i + 250));
}

function countBy<T>(values: readonly T[], key: (value: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const value of values) counts.set(key(value), (counts.get(key(value)) ?? 0) + 1);
  return counts;
}

describe('Saga with 1,000 instances on two worker processes', () => {
  let system: SagaSystem;

  beforeEach(async () => {
    system = await openSagaSystem(redisUrl, [PartAcknowledged, TallyCompleted], [PartArrived]);
  });

  afterEach(async () => {
    await system.close();
  });

  async function allInstances(): Promise<SagaSummary[]> {
    const instances: SagaSummary[] = [];
    let cursor: string | undefined;
    do {
      const page = await system.store.list(
        { saga: 'sf.Tally' },
        cursor === undefined ? { limit: 500 } : { limit: 500, cursor },
      );
      instances.push(...page.instances);
      cursor = page.next;
    } while (cursor !== undefined);
    return instances;
  }

  it('ends every instance with each part applied once and delivers each published message once per subscription', async () => {
    const { producer, admin, dir, prefix } = system;
    const outA = join(dir, 'worker-a.jsonl');
    const outB = join(dir, 'worker-b.jsonl');
    const settings = { redisUrl, prefix, saga: 'tally' } as const;
    const [workerA, workerB] = await Promise.all([
      startSagaWorker({ ...settings, outFile: outA }),
      startSagaWorker({ ...settings, outFile: outB }),
    ]);
    const lines = () => [...readSagaLines(outA), ...readSagaLines(outB)];
    const says = () => `A says:\n${workerA.output()}\nB says:\n${workerB.output()}`;

    // Each instance holds one part back for the second round, so some instances are still active
    // when their first parts are handed to the saga again.
    const now = Date.now();
    const firstRound: OutgoingMessage[] = [];
    const secondRound: OutgoingMessage[] = [];
    for (let i = 0; i < INSTANCES; i++) {
      const held = PARTS[Math.floor(Math.random() * PARTS.length)];
      for (const part of PARTS) {
        const payload = { tallyId: `t-${i}`, part, amount: PART_AMOUNTS[part] };
        const { outgoing } = prepareMessage(PartArrived, payload, {}, { now });
        (part === held ? secondRound : firstRound).push(outgoing);
      }
    }
    const acknowledged = () => system.received(PartAcknowledged.type).length;

    // Round 1: three parts of every instance, in random order, each id published twice.
    await inBatches(shuffled([...firstRound, ...firstRound]), (batch) => producer.publishBatch(batch));
    // Drained too: a message whose job is still running would not be handed over again.
    await waitFor(
      'the first round to be acknowledged and drained',
      async () => acknowledged() >= firstRound.length && (await jobsLeft(admin)) === 0,
      {
        timeoutMs: 30_000,
        explain: async () =>
          `${acknowledged()} of ${firstRound.length} acknowledged, ${await jobsLeft(admin)} jobs left; ${says()}`,
      },
    );

    // Round 2: the held-back parts (twice each), while parts already handled are delivered to the
    // saga again as new deliveries of the same message (redeliver skips the publish dedupe).
    const resent = shuffled(firstRound).slice(0, RESENT);
    await Promise.all([
      inBatches(shuffled([...secondRound, ...secondRound]), (batch) => producer.publishBatch(batch)),
      ...resent.map((message) => producer.redeliver({ endpoint: 'sf-tally', handler: 'sf.Tally', message })),
    ]);
    const completedAtWorkers = () =>
      lines().filter((l) => l.kind === 'received' && l.type === TallyCompleted.type).length;
    await waitFor(
      'every part acknowledged, every completion at both subscriptions and every queue drained',
      async () =>
        acknowledged() >= INSTANCES * PARTS.length &&
        system.received(TallyCompleted.type).length >= INSTANCES &&
        completedAtWorkers() >= INSTANCES &&
        (await jobsLeft(admin)) === 0,
      {
        timeoutMs: 45_000,
        explain: async () =>
          `${acknowledged()} acknowledged, ${system.received(TallyCompleted.type).length} completions here, ${completedAtWorkers()} at the workers, ${await jobsLeft(admin)} jobs left; ${says()}`,
      },
    );

    // Every instance's final state: each part applied exactly once, no update lost.
    const instances = await allInstances();
    expect(instances).toHaveLength(INSTANCES);
    const wrong = instances.filter(
      (instance) =>
        instance.status !== 'completed' ||
        JSON.stringify(sagaStateOf<TallyState>(instance)) !==
          JSON.stringify({ parts: PARTS, count: PARTS.length, total: FULL_TOTAL }),
    );
    expect(
      wrong.map((w) => ({ id: w.id, status: w.status, state: sagaStateOf(w) })),
      'instances whose final state is not the expected one',
    ).toEqual([]);

    // Each message the saga published reached the test's subscriptions once, one per applied part.
    const acks = system.received<{ tallyId: string; part: Part }>(PartAcknowledged.type);
    const completions = system.received<{ tallyId: string; count: number; total: number }>(
      TallyCompleted.type,
    );
    expect(
      acks.filter((a) => a.times !== 1),
      'acknowledgements received more than once',
    ).toEqual([]);
    expect(
      completions.filter((c) => c.times !== 1),
      'completions received more than once',
    ).toEqual([]);
    expect(acks).toHaveLength(INSTANCES * PARTS.length);
    expect(new Set(acks.map((a) => `${a.payload.tallyId}/${a.payload.part}`)).size).toBe(
      INSTANCES * PARTS.length,
    );
    expect(completions).toHaveLength(INSTANCES);
    expect(new Set(completions.map((c) => c.payload.tallyId)).size).toBe(INSTANCES);
    expect(
      completions.filter((c) => c.payload.count !== PARTS.length || c.payload.total !== FULL_TOTAL),
    ).toEqual([]);

    // ... and the workers' own subscription to the completions, once each, the same ids.
    const atWorkers = lines().filter((l) => l.kind === 'received' && l.type === TallyCompleted.type);
    expect([...countBy(atWorkers, (l) => l.messageId).values()].filter((n) => n !== 1)).toEqual([]);
    expect(new Set(atWorkers.map((l) => l.messageId))).toEqual(new Set(completions.map((c) => c.id)));

    // The saga took every part at least once, some of them more than once, in both processes.
    const sagaDeliveries = lines().filter((l) => l.kind === 'handled' && l.handler === 'sf.Tally');
    const deliveriesPerMessage = countBy(sagaDeliveries, (l) => l.messageId);
    expect(deliveriesPerMessage.size).toBe(INSTANCES * PARTS.length);
    const deliveredAgain = [...deliveriesPerMessage.values()].filter((n) => n > 1).length;
    expect(
      deliveredAgain,
      'parts handed to the saga again after their first delivery',
    ).toBeGreaterThanOrEqual(RESENT);
    const steps = lines().filter((l) => l.kind === 'step');
    const stepsByA = steps.filter((l) => l.pid === workerA.pid).length;
    const stepsByB = steps.filter((l) => l.pid === workerB.pid).length;
    expect(stepsByA, 'worker A ran steps').toBeGreaterThan(0);
    expect(stepsByB, 'worker B ran steps').toBeGreaterThan(0);
    console.info(
      `[saga-many-instances] ${INSTANCES} instances, ${firstRound.length + secondRound.length} parts published twice each, ${RESENT} redelivered; ${sagaDeliveries.length} saga deliveries handled (${deliveredAgain} parts more than once), ${steps.length} step runs (A ${stepsByA}, B ${stepsByB}; ${steps.length - INSTANCES * PARTS.length} re-runs after a conflict)`,
    );
  }, 120_000);
});
