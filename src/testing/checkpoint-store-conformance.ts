import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CheckpointStore } from '../log/checkpoint-store.js';
import { expectCode, failureOf } from './expect-code.js';

/** A store made fresh for one conformance test, and how to tidy up after it. */
export interface CheckpointStoreFixture {
  /** The store to test; the suite closes it after each test. */
  readonly store: CheckpointStore;
  /** Runs after the store is closed, e.g. to delete the test's Redis keys. */
  readonly cleanup?: () => Promise<void>;
}

/** Makes a fresh fixture for one test. */
export type CheckpointStoreFactory = () => Promise<CheckpointStoreFixture>;

const T0 = Date.UTC(2026, 0, 1);

/** A name of its own, so tests never collide on a shared server. */
const unique = (label: string): string => `conformance.${label}.${randomUUID()}`;

/**
 * Registers the vitest suite that every {@link CheckpointStore} must pass.
 *
 * @remarks
 * Each test gets a fresh store from `factory` and uses projection and topic names of its own, so
 * stores on a shared server never see each other's checkpoints. After each test the suite closes
 * the store, then awaits `cleanup`.
 *
 * @param name - names the implementation in the test report.
 * @param factory - makes a store for one test.
 *
 * @example
 * ```ts
 * import { describeCheckpointStoreConformance } from 'harrier/testing/conformance';
 *
 * describeCheckpointStoreConformance('MyCheckpointStore', async () => {
 *   const store = new MyCheckpointStore({ prefix: `test:${randomUUID()}` });
 *   return { store, cleanup: () => store.destroy() };
 * });
 * ```
 */
export function describeCheckpointStoreConformance(name: string, factory: CheckpointStoreFactory): void {
  describe(`CheckpointStore conformance: ${name}`, () => {
    let store: CheckpointStore;
    let cleanup: (() => Promise<void>) | undefined;
    let projection: string;
    let topic: string;

    beforeEach(async () => {
      const fixture = await factory();
      store = fixture.store;
      cleanup = fixture.cleanup;
      projection = unique('projection');
      topic = unique('topic');
    });

    afterEach(async () => {
      await store.close();
      await cleanup?.();
    });

    describe('.get', () => {
      describe('when nothing was committed', () => {
        it('returns undefined', async () => {
          expect(await store.get(projection, topic, 0)).toBeUndefined();
        });
      });

      describe('when a checkpoint was committed', () => {
        it('returns its offset', async () => {
          await store.commit(projection, topic, 0, 0, T0);
          expect(await store.get(projection, topic, 0)).toBe(0);
        });
      });
    });

    describe('.commit', () => {
      describe('when the offset is higher than the stored one', () => {
        it('raises the checkpoint and returns the new offset', async () => {
          expect(await store.commit(projection, topic, 0, 3, T0)).toBe(3);
          expect(await store.commit(projection, topic, 0, 9, T0 + 1)).toBe(9);
          expect(await store.get(projection, topic, 0)).toBe(9);
        });
      });

      describe('when the offset is lower than or equal to the stored one', () => {
        it('keeps the higher offset and returns it', async () => {
          await store.commit(projection, topic, 0, 9, T0);
          expect(await store.commit(projection, topic, 0, 4, T0 + 1)).toBe(9);
          expect(await store.commit(projection, topic, 0, 9, T0 + 2)).toBe(9);
          expect(await store.get(projection, topic, 0)).toBe(9);
        });
      });

      describe('when commits race', () => {
        it('ends at the highest offset', async () => {
          const results = await Promise.all(
            [5, 2, 8, 1, 7].map((offset) => store.commit(projection, topic, 0, offset, T0)),
          );
          expect(await store.get(projection, topic, 0)).toBe(8);
          for (const result of results) expect(result).toBeLessThanOrEqual(8);
        });
      });

      describe('when projections, topics and partitions differ', () => {
        it('keeps each checkpoint on its own', async () => {
          const other = unique('projection');
          const otherTopic = unique('topic');
          await store.commit(projection, topic, 0, 5, T0);
          await store.commit(projection, topic, 1, 2, T0);
          await store.commit(projection, otherTopic, 0, 7, T0);
          await store.commit(other, topic, 0, 1, T0);
          expect(await store.get(projection, topic, 0)).toBe(5);
          expect(await store.get(projection, topic, 1)).toBe(2);
          expect(await store.get(projection, otherTopic, 0)).toBe(7);
          expect(await store.get(other, topic, 0)).toBe(1);
          expect(await store.get(other, topic, 1)).toBeUndefined();
        });
      });

      describe('when the offset is invalid', () => {
        for (const offset of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
          it(`rejects ${offset} with HarrierError invalid-argument and stores nothing`, async () => {
            const error = await failureOf(() => store.commit(projection, topic, 0, offset, T0));
            expectCode(error, 'invalid-argument');
            expect(await store.get(projection, topic, 0)).toBeUndefined();
          });
        }
      });
    });

    describe('.list', () => {
      describe('when a projection is given', () => {
        it('returns its checkpoints with their commit times', async () => {
          const other = unique('projection');
          await store.commit(projection, topic, 0, 4, T0);
          await store.commit(projection, topic, 1, 6, T0 + 5);
          await store.commit(other, topic, 0, 1, T0);
          const listed = await store.list(projection);
          expect(listed).toHaveLength(2);
          expect(listed).toEqual(
            expect.arrayContaining([
              { projection, topic, partition: 0, offset: 4, updatedAt: T0 },
              { projection, topic, partition: 1, offset: 6, updatedAt: T0 + 5 },
            ]),
          );
        });

        it('keeps the time of the last raise when a commit does not raise', async () => {
          await store.commit(projection, topic, 0, 4, T0);
          await store.commit(projection, topic, 0, 2, T0 + 10);
          expect(await store.list(projection)).toEqual([
            { projection, topic, partition: 0, offset: 4, updatedAt: T0 },
          ]);
        });

        it('returns nothing for a projection without checkpoints', async () => {
          expect(await store.list(unique('projection'))).toEqual([]);
        });
      });

      describe('when no projection is given', () => {
        it('returns the checkpoints of every projection', async () => {
          const other = unique('projection');
          await store.commit(projection, topic, 0, 4, T0);
          await store.commit(other, topic, 0, 1, T0);
          expect(await store.list()).toEqual(
            expect.arrayContaining([
              { projection, topic, partition: 0, offset: 4, updatedAt: T0 },
              { projection: other, topic, partition: 0, offset: 1, updatedAt: T0 },
            ]),
          );
        });
      });
    });

    describe('.reset', () => {
      describe('when the projection has checkpoints', () => {
        it('removes all of them and no others', async () => {
          const other = unique('projection');
          await store.commit(projection, topic, 0, 4, T0);
          await store.commit(projection, topic, 1, 6, T0);
          await store.commit(other, topic, 0, 1, T0);
          await store.reset(projection);
          expect(await store.get(projection, topic, 0)).toBeUndefined();
          expect(await store.list(projection)).toEqual([]);
          expect(await store.get(other, topic, 0)).toBe(1);
        });

        it('asks for a rebuild: sets a marker and raises the generation', async () => {
          await store.commit(projection, topic, 0, 4, T0);
          await store.reset(projection);
          const after = await store.generation(projection);
          expect(after.generation).toBe(1);
          expect(after.rebuild?.id).toMatch(/^requested:./);
          expect(await store.endRebuild(projection, after.rebuild?.id ?? '')).toBe(true);
        });

        it('lets the projection commit from a lower offset again', async () => {
          await store.commit(projection, topic, 0, 9, T0);
          await store.reset(projection);
          expect(await store.commit(projection, topic, 0, 0, T0 + 1)).toBe(0);
          expect(await store.get(projection, topic, 0)).toBe(0);
        });
      });
    });

    describe('.generation', () => {
      describe('when the projection was never rebuilt', () => {
        it('is 0 without a rebuild marker', async () => {
          await store.commit(projection, topic, 0, 4, T0);
          expect(await store.generation(projection)).toEqual({
            projection,
            generation: 0,
            rebuild: undefined,
          });
        });
      });
    });

    describe('.beginRebuild', () => {
      describe('when no rebuild is under way', () => {
        it('sets the marker, raises the generation and removes the checkpoints, in one step', async () => {
          const other = unique('projection');
          await store.commit(projection, topic, 0, 4, T0);
          await store.commit(projection, topic, 1, 6, T0);
          await store.commit(other, topic, 0, 1, T0);
          const begun = await store.beginRebuild(projection, 'rebuild-1', T0 + 5);
          const expected = { projection, generation: 1, rebuild: { id: 'rebuild-1', startedAt: T0 + 5 } };
          expect(begun).toEqual(expected);
          expect(await store.generation(projection)).toEqual(expected);
          expect(await store.list(projection)).toEqual([]);
          expect(await store.get(other, topic, 0)).toBe(1);
          expect(await store.generation(other)).toEqual({
            projection: other,
            generation: 0,
            rebuild: undefined,
          });
        });

        it('raises the generation again on every rebuild', async () => {
          await store.beginRebuild(projection, 'rebuild-1', T0);
          await store.endRebuild(projection, 'rebuild-1');
          expect((await store.beginRebuild(projection, 'rebuild-2', T0 + 1))?.generation).toBe(2);
        });
      });

      describe('when replacing a rebuild', () => {
        it('takes over the rebuild whose marker is set, with a new id and generation', async () => {
          await store.beginRebuild(projection, 'crashed', T0);
          await store.commit(projection, topic, 0, 3, T0);
          const taken = await store.beginRebuild(projection, 'resumed', T0 + 1, 'crashed');
          expect(taken).toEqual({ projection, generation: 2, rebuild: { id: 'resumed', startedAt: T0 + 1 } });
          expect(await store.get(projection, topic, 0)).toBeUndefined();
        });

        it('changes nothing and returns undefined when the marker names another rebuild', async () => {
          await store.beginRebuild(projection, 'first', T0);
          await store.commit(projection, topic, 0, 3, T0);
          expect(await store.beginRebuild(projection, 'mine', T0 + 1, 'someone-else')).toBeUndefined();
          expect(await store.generation(projection)).toEqual({
            projection,
            generation: 1,
            rebuild: { id: 'first', startedAt: T0 },
          });
          expect(await store.get(projection, topic, 0)).toBe(3);
        });

        it('changes nothing and returns undefined when no marker is set', async () => {
          await store.commit(projection, topic, 0, 3, T0);
          expect(await store.beginRebuild(projection, 'mine', T0, 'gone')).toBeUndefined();
          expect(await store.generation(projection)).toEqual({
            projection,
            generation: 0,
            rebuild: undefined,
          });
          expect(await store.get(projection, topic, 0)).toBe(3);
        });

        it('lets exactly one of racing takeovers win', async () => {
          await store.beginRebuild(projection, 'crashed', T0);
          const results = await Promise.all(
            ['a', 'b', 'c', 'd'].map((id) => store.beginRebuild(projection, id, T0 + 1, 'crashed')),
          );
          const winners = results.filter((r) => r !== undefined);
          expect(winners).toHaveLength(1);
          expect(await store.generation(projection)).toEqual(winners[0]);
        });
      });
    });

    describe('.endRebuild', () => {
      describe("when the marker is the rebuild's", () => {
        it('clears it and keeps the generation', async () => {
          await store.beginRebuild(projection, 'rebuild-1', T0);
          expect(await store.endRebuild(projection, 'rebuild-1')).toBe(true);
          expect(await store.generation(projection)).toEqual({
            projection,
            generation: 1,
            rebuild: undefined,
          });
        });
      });

      describe('when the marker names another rebuild, or none is set', () => {
        it('returns false and changes nothing', async () => {
          expect(await store.endRebuild(projection, 'none')).toBe(false);
          await store.beginRebuild(projection, 'taken-over', T0);
          expect(await store.endRebuild(projection, 'first')).toBe(false);
          expect((await store.generation(projection)).rebuild).toEqual({ id: 'taken-over', startedAt: T0 });
        });
      });
    });

    describe('.generations', () => {
      it('lists each rebuilt projection with its generation and marker', async () => {
        const other = unique('projection');
        await store.beginRebuild(projection, 'rebuild-1', T0);
        await store.endRebuild(projection, 'rebuild-1');
        await store.beginRebuild(other, 'rebuild-2', T0 + 1);
        const listed = await store.generations();
        expect(listed).toEqual(
          expect.arrayContaining([
            { projection, generation: 1, rebuild: undefined },
            { projection: other, generation: 1, rebuild: { id: 'rebuild-2', startedAt: T0 + 1 } },
          ]),
        );
      });
    });

    describe('.commit given a generation', () => {
      describe("when it is the projection's generation and no rebuild is under way", () => {
        it('raises the checkpoint', async () => {
          expect(await store.commit(projection, topic, 0, 3, T0, { generation: 0 })).toBe(3);
          await store.beginRebuild(projection, 'rebuild-1', T0);
          await store.endRebuild(projection, 'rebuild-1');
          expect(await store.commit(projection, topic, 0, 1, T0, { generation: 1 })).toBe(1);
          expect(await store.get(projection, topic, 0)).toBe(1);
        });
      });

      describe('when the projection was rebuilt since (a stale writer)', () => {
        it('rejects with HarrierError projection-rebuilt and writes nothing', async () => {
          await store.commit(projection, topic, 0, 3, T0, { generation: 0 });
          await store.beginRebuild(projection, 'rebuild-1', T0);
          await store.endRebuild(projection, 'rebuild-1');
          await store.commit(projection, topic, 0, 1, T0, { generation: 1 });
          const error = await failureOf(() => store.commit(projection, topic, 0, 9, T0, { generation: 0 }));
          expectCode(error, 'projection-rebuilt');
          expect(await store.get(projection, topic, 0)).toBe(1);
          const fresh = await failureOf(() => store.commit(projection, topic, 1, 9, T0, { generation: 0 }));
          expectCode(fresh, 'projection-rebuilt');
          expect(await store.get(projection, topic, 1)).toBeUndefined();
        });
      });

      describe('when a rebuild is under way', () => {
        it('rejects with HarrierError projection-rebuilt, even at the new generation', async () => {
          await store.beginRebuild(projection, 'rebuild-1', T0);
          const error = await failureOf(() => store.commit(projection, topic, 0, 2, T0, { generation: 1 }));
          expectCode(error, 'projection-rebuilt');
          expect(await store.get(projection, topic, 0)).toBeUndefined();
        });
      });
    });

    describe('.lowest', () => {
      describe('when projections hold checkpoints in the partition', () => {
        it('returns the lowest of them', async () => {
          const second = unique('projection');
          const third = unique('projection');
          await store.commit(projection, topic, 0, 8, T0);
          await store.commit(second, topic, 0, 3, T0);
          await store.commit(third, topic, 0, 5, T0);
          await store.commit(third, topic, 1, 0, T0);
          expect(await store.lowest(topic, 0)).toBe(3);
          expect(await store.lowest(topic, 1)).toBe(0);
        });

        it('moves up when the lowest projection is reset', async () => {
          const second = unique('projection');
          await store.commit(projection, topic, 0, 8, T0);
          await store.commit(second, topic, 0, 3, T0);
          await store.reset(second);
          expect(await store.lowest(topic, 0)).toBe(8);
        });
      });

      describe('when no projection holds a checkpoint in the partition', () => {
        it('returns undefined', async () => {
          await store.commit(projection, topic, 1, 4, T0);
          expect(await store.lowest(topic, 0)).toBeUndefined();
        });
      });
    });
  });
}
