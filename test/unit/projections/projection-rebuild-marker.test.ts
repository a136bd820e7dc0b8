/**
 * The ProjectionRunner's rebuild marker and generation, on the in-memory stores: the order of a
 * rebuild's steps, a rebuild whose reset() failed completed by the next start, and a rebuild from
 * outside noticed at the next checkpoint commit.
 */
import 'reflect-metadata';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  On,
  Projection,
  createBus,
  defineEvent,
  silentLogger,
  type MessageBus,
  type PayloadOf,
} from '../../../src/index.js';
import {
  InMemoryCheckpointStore,
  InMemoryEventLog,
  type CommitOptions,
  type ProjectionGeneration,
} from '../../../src/log/index.js';

const Added = defineEvent('marker.Added', {
  schema: z.object({ key: z.string(), n: z.number() }),
  partitionKey: 'key',
  topic: 'marker',
});

/** The read model: per key, the sum of what was added (an event applied twice shows). */
const sums = new Map<string, number>();
let failResets = 0;
const steps: string[] = [];

@Projection('sums')
class Sums {
  @On(Added)
  onAdded(e: PayloadOf<typeof Added>): void {
    sums.set(e.key, (sums.get(e.key) ?? 0) + e.n);
  }
  reset(): void {
    steps.push('reset()');
    if (failResets > 0) {
      failResets--;
      throw new Error('read model unreachable');
    }
    sums.clear();
  }
}

/** The in-memory store, noting the steps a rebuild takes in `steps`. */
class NotingCheckpointStore extends InMemoryCheckpointStore {
  override async beginRebuild(
    projection: string,
    id: string,
    nowMs: number,
    replacing?: string,
  ): Promise<ProjectionGeneration | undefined> {
    steps.push(replacing === undefined ? 'beginRebuild' : 'beginRebuild(replacing)');
    return super.beginRebuild(projection, id, nowMs, replacing);
  }
  override async endRebuild(projection: string, id: string): Promise<boolean> {
    steps.push('endRebuild');
    return super.endRebuild(projection, id);
  }
  override async commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
    options?: CommitOptions,
  ): Promise<number> {
    steps.push('commit');
    return super.commit(projection, topic, partition, offset, nowMs, options);
  }
}

const buses: MessageBus[] = [];
let log: InMemoryEventLog;
let checkpoints: NotingCheckpointStore;

beforeEach(() => {
  sums.clear();
  failResets = 0;
  steps.length = 0;
  log = new InMemoryEventLog({ topics: [{ name: 'marker', partitions: 2 }] });
  checkpoints = new NotingCheckpointStore();
});

afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.stop()));
});

function bus(rebuildCheckIntervalMs = 0, rebuildTakeoverMs = 30_000): MessageBus {
  const made = createBus({
    endpoint: 'marker',
    handlers: [Sums],
    definitions: [Added],
    eventLog: log,
    checkpoints,
    logger: silentLogger,
    projections: { commitEvery: 1, rebuildCheckIntervalMs, rebuildTakeoverMs },
  });
  buses.push(made);
  return made;
}

async function publish(b: MessageBus, count: number): Promise<Record<string, number>> {
  for (let i = 0; i < count; i++) await b.publish(Added, { key: `k${i % 3}`, n: i + 1 });
  await b.projections?.whenCaughtUp();
  return Object.fromEntries(sums);
}

describe('ProjectionRunner rebuild marker', () => {
  describe('.rebuild', () => {
    it('sets the marker and removes the checkpoints, resets, then clears the marker, before any commit', async () => {
      const b = bus();
      await b.start();
      const live = await publish(b, 9);
      steps.length = 0;
      await b.projections?.rebuild('sums');
      await b.projections?.whenCaughtUp();
      expect(steps.slice(0, 3)).toEqual(['beginRebuild', 'reset()', 'endRebuild']);
      expect(steps.slice(3).every((s) => s === 'commit')).toBe(true);
      expect(Object.fromEntries(sums)).toEqual(live);
      expect(await checkpoints.generation('sums')).toEqual({
        projection: 'sums',
        generation: 1,
        rebuild: undefined,
      });
    });

    describe('when reset() fails', () => {
      it('leaves the marker set, and the next start completes the rebuild before projecting', async () => {
        const first = bus();
        await first.start();
        const live = await publish(first, 9);
        failResets = 1;
        await expect(first.projections?.rebuild('sums')).rejects.toThrow('read model unreachable');
        await first.stop();
        const marked = await checkpoints.generation('sums');
        expect(marked.rebuild).toBeDefined();
        expect(await checkpoints.list('sums')).toEqual([]);
        // The old read model is still there: replaying onto it would double every sum.
        expect(Object.fromEntries(sums)).toEqual(live);

        steps.length = 0;
        const second = bus();
        await second.start();
        await second.projections?.whenCaughtUp();
        expect(steps.slice(0, 3)).toEqual(['beginRebuild(replacing)', 'reset()', 'endRebuild']);
        expect(Object.fromEntries(sums)).toEqual(live);
        expect(await checkpoints.generation('sums')).toEqual({
          projection: 'sums',
          generation: marked.generation + 1,
          rebuild: undefined,
        });
      });
    });
  });

  describe('when reset() fails in a running bus', () => {
    it('keeps the projection stopped with its marker set until the next check completes the rebuild', async () => {
      const b = bus(0);
      await b.start();
      const live = await publish(b, 9);
      failResets = 1;
      await expect(b.projections?.rebuild('sums')).rejects.toThrow('read model unreachable');
      expect((await checkpoints.generation('sums')).rebuild).toBeDefined();
      expect((await b.projections?.status())?.[0]?.generation).toBeUndefined();
      expect(await b.projections?.checkExternalRebuilds()).toEqual(['sums']);
      await b.projections?.whenCaughtUp();
      expect(Object.fromEntries(sums)).toEqual(live);
      expect(await checkpoints.generation('sums')).toEqual({
        projection: 'sums',
        generation: 2,
        rebuild: undefined,
      });
      expect((await b.projections?.status())?.[0]?.generation).toBe(2);
    });
  });

  describe('when the projection is rebuilt from outside while it runs (no periodic check)', () => {
    it('refuses the stale commit, restarts the projection, completes the rebuild and ends exact', async () => {
      const b = bus(0);
      await b.start();
      await publish(b, 6);
      await checkpoints.reset('sums');
      const asked = await checkpoints.generation('sums');
      // The next commit of the old generation is refused, which restarts the projection.
      for (let i = 6; i < 12; i++) await b.publish(Added, { key: `k${i % 3}`, n: i + 1 });
      const expected: Record<string, number> = {};
      for (let i = 0; i < 12; i++) expected[`k${i % 3}`] = (expected[`k${i % 3}`] ?? 0) + i + 1;
      await expect.poll(async () => (await checkpoints.generation('sums')).rebuild === undefined).toBe(true);
      await b.projections?.whenCaughtUp();
      expect(Object.fromEntries(sums)).toEqual(expected);
      expect(await checkpoints.generation('sums')).toEqual({
        projection: 'sums',
        generation: asked.generation + 1,
        rebuild: undefined,
      });
      const ends = [await log.endOffset('marker', 0), await log.endOffset('marker', 1)];
      for (const [partition, end] of ends.entries()) {
        if (end > 0) expect(await checkpoints.get('sums', 'marker', partition)).toBe(end - 1);
      }
    });
  });

  describe('when another runner is rebuilding the projection', () => {
    it('waits for that rebuild to end and replays from its checkpoints, without a reset() of its own', async () => {
      const b = bus(0);
      await b.start();
      const live = await publish(b, 6);
      steps.length = 0;
      // Another runner's rebuild (an id of a runner, not one asked from outside), in its reset().
      await checkpoints.beginRebuild('sums', 'other-runner', Date.now());
      sums.clear();
      steps.length = 0;
      const restarted = b.projections?.checkExternalRebuilds();
      await expect.poll(async () => (await b.projections?.status())?.[0]?.generation).toBeUndefined();
      // Not noted in `steps`: the other runner's step, not this one's.
      await InMemoryCheckpointStore.prototype.endRebuild.call(checkpoints, 'sums', 'other-runner');
      expect(await restarted).toEqual(['sums']);
      await b.projections?.whenCaughtUp();
      expect(steps.filter((step) => step !== 'commit')).toEqual([]);
      expect(Object.fromEntries(sums)).toEqual(live);
      expect((await b.projections?.status())?.[0]?.generation).toBe(1);
    });

    it('takes the rebuild over once it stays under way longer than rebuildTakeoverMs', async () => {
      const b = bus(0, 50);
      await b.start();
      const live = await publish(b, 6);
      steps.length = 0;
      await checkpoints.beginRebuild('sums', 'dead-runner', Date.now());
      steps.length = 0;
      expect(await b.projections?.checkExternalRebuilds()).toEqual(['sums']);
      await b.projections?.whenCaughtUp();
      expect(steps.filter((step) => step !== 'commit')).toEqual([
        'beginRebuild(replacing)',
        'reset()',
        'endRebuild',
      ]);
      expect(Object.fromEntries(sums)).toEqual(live);
      expect(await checkpoints.generation('sums')).toEqual({
        projection: 'sums',
        generation: 2,
        rebuild: undefined,
      });
    });
  });

  describe('.checkExternalRebuilds', () => {
    it('restarts nothing while the generation is the one the lanes started at', async () => {
      const b = bus(0);
      await b.start();
      await publish(b, 3);
      expect(await b.projections?.checkExternalRebuilds()).toEqual([]);
    });
  });
});
