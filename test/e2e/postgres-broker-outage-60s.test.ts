/**
 * PostgresBroker through a 60 s PostgreSQL outage (DESIGN.md guarantee 11): the server the broker,
 * the inbox and the handlers' effects live in is stopped for 60 s while the test keeps publishing.
 * The worker pauses and resumes by itself, no process crashes, the outage dead-letters nothing and
 * spends no attempt (the deliveries it held are given back once the server answers), every message
 * published before and after it is applied once, and each publish tried while the server is away is refused with
 * `postgres-unavailable` (or waits for it). A file of its own: it spends most of its minute waiting,
 * while the other files run.
 */
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  appliedCount,
  expectOutageRiddenOut,
  startOutageScene,
  type OutageScene,
} from './fixtures/pg-broker-outage.js';
import { readPgLines, waitFor } from './fixtures/pg-broker-harness.js';

const redisUrl = inject('redisUrl');
const OUTAGE_MS = 60_000;
const BEFORE = 400;
const AFTER = 400;

let scene: OutageScene | undefined;

afterEach(async () => {
  await scene?.close();
  scene = undefined;
});

describe('PostgresBroker outages', () => {
  describe('when PostgreSQL is stopped for 60 s while messages flow', () => {
    it('pauses and resumes: no crash, no dead letter, no attempt spent, every message sent before and after applied once', async () => {
      const running = await startOutageScene(redisUrl);
      scene = running;
      await running.publishBatch(0, BEFORE);
      await waitFor('some messages to be applied', async () => (await appliedCount(running)) >= BEFORE / 4, {
        timeoutMs: 20_000,
        explain: () => running.worker.output(),
      });

      running.postgres.halt();
      const stoppedAt = Date.now();
      // Publishing goes on through the outage: each try is refused (or waits) until the server is back.
      const during = running.publish(BEFORE);
      await waitFor(
        'the publish during the outage to be refused or held',
        () => running.refusals.length > 0 || running.pendingMs() >= 1_000,
        { timeoutMs: 15_000 },
      );
      // The outage's length is what the test is about, not a condition to wait for.
      await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS - (Date.now() - stoppedAt)));
      running.postgres.start();
      await during;
      await running.publishRange(BEFORE + 1, BEFORE + 1 + AFTER);

      const summary = await expectOutageRiddenOut(running, expect);
      const lines = readPgLines(running.outFile);
      expect(
        lines.some((l) => l.outcome === 'paused'),
        'the worker paused',
      ).toBe(true);
      expect(running.acknowledged).toHaveLength(BEFORE + 1 + AFTER);
      console.info(`[postgres-broker-outage-60s] 60 s stop: ${summary}`);
    }, 180_000);
  });
});
