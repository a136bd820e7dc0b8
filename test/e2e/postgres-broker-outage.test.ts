/**
 * PostgresBroker through PostgreSQL restarts (DESIGN.md guarantee 11): the server the broker, the
 * inbox and the handlers' effects live in is restarted twice while a worker process handles and the
 * test publishes. An outage is not a message failure: the worker pauses and resumes by itself, no
 * process crashes, nothing is dead-lettered, no attempt is spent, every acknowledged message is
 * applied once, and a publish made while the server is away is refused with `postgres-unavailable`
 * (or waits for it).
 * The 60 s stop is in outage-pause.test.ts, run there beside the other minute-long outages.
 */
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  appliedCount,
  expectOutageRiddenOut,
  startOutageScene,
  type OutageScene,
} from './fixtures/pg-broker-outage.js';
import { waitFor } from './fixtures/pg-broker-harness.js';

const redisUrl = inject('redisUrl');
const TOTAL = 600;
/** The server is stopped once this many publishes are acknowledged (and some applied). */
const RESTART_AT = [TOTAL / 4, TOTAL / 2];
/**
 * Publish n waits until restart i has stopped the server, so a publish always meets each outage:
 * a producer that got through all of them before the stop would leave nothing to refuse.
 */
const HOLD_AT = RESTART_AT.map((at) => at + 50);

let scene: OutageScene | undefined;

afterEach(async () => {
  await scene?.close();
  scene = undefined;
});

/** Restarts the server once the producer has felt it go: a publish refused or held for a second. */
async function restartUnderLoad(running: OutageScene, halted: { count: number }): Promise<void> {
  const refusedBefore = running.refusals.length;
  running.postgres.halt();
  halted.count += 1;
  await waitFor(
    'a publish to meet the stopped server',
    () => running.refusals.length > refusedBefore || running.pendingMs() >= 1_000,
    { timeoutMs: 15_000 },
  );
  running.postgres.start();
}

describe('PostgresBroker outages', () => {
  describe('when PostgreSQL is restarted twice while messages flow', () => {
    it('rides them out: no crash, no dead letter, no attempt spent, every acknowledged message applied once, refused publishes say postgres-unavailable', async () => {
      const running = await startOutageScene(redisUrl);
      scene = running;
      const run = { abandoned: false };
      const halted = { count: 0 };
      const publishing = (async () => {
        for (let n = 0; n < TOTAL && !run.abandoned; n++) {
          const hold = HOLD_AT.indexOf(n);
          if (hold !== -1) {
            await waitFor(`stop ${hold + 1} of the server`, () => halted.count > hold || run.abandoned, {
              timeoutMs: 30_000,
            });
          }
          await running.publish(n);
        }
      })().then(
        () => undefined,
        (error: unknown) => (error instanceof Error ? error : new Error(String(error))),
      );
      try {
        for (const at of RESTART_AT) {
          await waitFor(
            `${at} messages acknowledged, some of them applied`,
            async () => running.acknowledged.length >= at && (await appliedCount(running)) >= at / 4,
            { timeoutMs: 20_000, explain: () => running.worker.output() },
          );
          await restartUnderLoad(running, halted);
        }
        const publishFailure = await publishing;
        if (publishFailure !== undefined) throw publishFailure;

        const summary = await expectOutageRiddenOut(running, expect);
        expect(running.acknowledged).toHaveLength(TOTAL);
        console.info(`[postgres-broker-outage] 2 restarts: ${summary}`);
      } finally {
        run.abandoned = true;
        await publishing;
      }
    }, 60_000);
  });
});
