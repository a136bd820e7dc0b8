import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../clock/manual-clock.js';
import { SagaConflictError } from '../errors/saga-conflict-error.js';
import type {
  SagaAppliedStep,
  SagaInstance,
  SagaSummary,
  SagaListFilter,
  SagaStatus,
  SagaStore,
  SagaTimeoutRecord,
  SagaWrite,
} from '../sagas/saga-store.js';
import { expectCode, failureOf } from './expect-code.js';

/** A store under test and how to clean up after it. */
export interface SagaStoreFixture {
  /** A new, empty store (for a shared server: its own key prefix). */
  readonly store: SagaStore;
  /** Removes what the test left behind; called after each test, before the suite closes the store. */
  readonly cleanup?: () => Promise<void>;
}

/** What the suite asks of the store it gets from a {@link SagaStoreFactory}. */
export interface SagaStoreFactoryOptions {
  /** The store's `completedRetentionMs`; absent: the store's default. */
  readonly completedRetentionMs?: number;
  /**
   * A clock the suite advances past the retention; a store that measures retention on its own (a
   * Redis TTL) may ignore it, and the suite then waits for the real time to pass.
   */
  readonly clock: ManualClock;
}

/** Makes a fresh fixture for one test. */
export type SagaStoreFactory = (options: SagaStoreFactoryOptions) => Promise<SagaStoreFixture>;

const T0 = Date.UTC(2026, 0, 1);
/** Short, so a store that expires by real time (a Redis TTL) finishes the retention test quickly. */
const RETENTION_MS = 600;

/** A write of `saga`/`id` with sensible defaults. */
function write(saga: string, id: string, fields: Partial<SagaWrite> = {}): SagaWrite {
  return { saga, id, state: { step: 1 }, status: 'active', timeouts: [], now: T0, ...fields };
}

const positions = (instances: readonly SagaSummary[]): string[] => instances.map((i) => `${i.saga}/${i.id}`);

/**
 * Registers the vitest suite that every {@link SagaStore} must pass.
 *
 * @remarks
 * Each test gets a fresh store from `factory`, so the store it returns must start empty (on a shared
 * server, give it a key prefix of its own) and use the given `completedRetentionMs`. Pass the given
 * clock to a store that measures retention with a clock; one that expires by real time (a Redis TTL)
 * is waited for. After each test the suite awaits `cleanup`, then closes the store.
 *
 * @param name - names the implementation in the test report.
 * @param factory - makes a new, empty store for one test.
 *
 * @example
 * ```ts
 * import { describeSagaStoreConformance } from 'harrier/testing/conformance';
 *
 * describeSagaStoreConformance('MySagaStore', async ({ completedRetentionMs, clock }) => {
 *   const store = new MySagaStore({ prefix: `test:${randomUUID()}`, completedRetentionMs, clock });
 *   return { store, cleanup: () => store.destroy() };
 * });
 * ```
 */
export function describeSagaStoreConformance(name: string, factory: SagaStoreFactory): void {
  describe(`SagaStore conformance: ${name}`, () => {
    let store: SagaStore;
    let cleanup: (() => Promise<void>) | undefined;
    let clock: ManualClock;

    async function open(completedRetentionMs?: number): Promise<void> {
      clock = new ManualClock(T0);
      const fixture = await factory(
        completedRetentionMs === undefined ? { clock } : { clock, completedRetentionMs },
      );
      store = fixture.store;
      cleanup = fixture.cleanup;
    }

    beforeEach(async () => {
      await open();
    });

    afterEach(async () => {
      await cleanup?.();
      await store.close();
    });

    /** A saga name of its own, so tests never see each other's instances on a shared server. */
    const sagaName = (label: string): string => `conformance.${label}.${randomUUID()}`;

    async function mustGet(saga: string, id: string): Promise<SagaInstance> {
      const instance = await store.get(saga, id);
      if (instance === undefined)
        throw new Error(`expected the store to hold saga "${saga}" instance "${id}"`);
      return instance;
    }

    async function allPages(filter: SagaListFilter, limit: number): Promise<SagaSummary[][]> {
      const pages: SagaSummary[][] = [];
      let cursor: string | undefined;
      do {
        const page = await store.list(filter, cursor === undefined ? { limit } : { limit, cursor });
        pages.push(page.instances);
        cursor = page.next;
        if (pages.length > 1000) throw new Error('list never returned a last page (next stays defined)');
      } while (cursor !== undefined);
      return pages;
    }

    describe('.save', () => {
      describe('with expected version 0 and no stored instance', () => {
        it('creates the instance at version 1 and returns it', async () => {
          const saga = sagaName('create');
          const timeouts: SagaTimeoutRecord[] = [
            { id: 't-1', type: 'orders.PaymentTimedOut', dueAt: T0 + 60_000 },
          ];
          const created = await store.save(write(saga, 'o-1', { state: { paid: false }, timeouts }), 0);
          const expected: SagaInstance = {
            saga,
            id: 'o-1',
            state: { paid: false },
            stateVersion: 1,
            version: 1,
            status: 'active',
            startedAt: T0,
            updatedAt: T0,
            timeouts,
            applied: [],
          };
          expect(created).toEqual(expected);
          expect(await store.get(saga, 'o-1')).toEqual(expected);
        });
      });

      describe('with expected version 0 and a stored instance', () => {
        it('rejects with saga-conflict and keeps the stored instance', async () => {
          const saga = sagaName('exists');
          await store.save(write(saga, 'o-1', { state: { n: 1 } }), 0);
          const error = await failureOf(() => store.save(write(saga, 'o-1', { state: { n: 2 } }), 0));
          expectCode(error, 'saga-conflict');
          expect(error).toBeInstanceOf(SagaConflictError);
          expect(error).toMatchObject({ saga, sagaId: 'o-1', expectedVersion: 0, actualVersion: 1 });
          expect((await mustGet(saga, 'o-1')).state).toEqual({ n: 1 });
        });
      });

      describe('with the stored version', () => {
        it('replaces state, status and timeouts, adds 1 to the version and keeps startedAt', async () => {
          const saga = sagaName('cas');
          await store.save(write(saga, 'o-1', { timeouts: [{ id: 't', type: 'x.T', dueAt: T0 + 1 }] }), 0);
          const second = await store.save(write(saga, 'o-1', { state: { step: 2 }, now: T0 + 10 }), 1);
          const third = await store.save(write(saga, 'o-1', { state: { step: 3 }, now: T0 + 20 }), 2);
          expect(second).toMatchObject({ version: 2, state: { step: 2 }, timeouts: [], updatedAt: T0 + 10 });
          expect(third).toMatchObject({ version: 3, state: { step: 3 }, startedAt: T0, updatedAt: T0 + 20 });
          expect(await store.get(saga, 'o-1')).toEqual(third);
        });
      });

      describe('with a version that is not the stored one', () => {
        it('rejects with saga-conflict, says both versions and keeps the stored instance', async () => {
          const saga = sagaName('stale');
          await store.save(write(saga, 'o-1'), 0);
          await store.save(write(saga, 'o-1', { state: { step: 2 } }), 1);
          for (const expectedVersion of [1, 3]) {
            const error = await failureOf(() =>
              store.save(write(saga, 'o-1', { state: { step: 9 } }), expectedVersion),
            );
            expectCode(error, 'saga-conflict');
            expect(error).toMatchObject({ expectedVersion, actualVersion: 2 });
          }
          expect(await mustGet(saga, 'o-1')).toMatchObject({ version: 2, state: { step: 2 } });
        });

        it('rejects with saga-conflict when no instance is stored', async () => {
          const saga = sagaName('absent');
          const error = await failureOf(() => store.save(write(saga, 'o-1'), 1));
          expectCode(error, 'saga-conflict');
          expect(error).toMatchObject({ expectedVersion: 1, actualVersion: 0 });
          expect(await store.get(saga, 'o-1')).toBeUndefined();
        });
      });

      describe('when several saves expect the same version at once', () => {
        it('lets exactly one win and rejects the others with saga-conflict', async () => {
          const saga = sagaName('race');
          await store.save(write(saga, 'o-1'), 0);
          const results = await Promise.allSettled(
            Array.from({ length: 8 }, (_, n) => store.save(write(saga, 'o-1', { state: { winner: n } }), 1)),
          );
          const won = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
          const lost = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
          expect(won).toHaveLength(1);
          expect(lost).toHaveLength(7);
          for (const error of lost) expectCode(error, 'saga-conflict');
          expect(await store.get(saga, 'o-1')).toEqual(won[0]);
        });

        it('lets exactly one create win', async () => {
          const saga = sagaName('create-race');
          const results = await Promise.allSettled(
            Array.from({ length: 8 }, (_, n) => store.save(write(saga, 'o-1', { state: { winner: n } }), 0)),
          );
          expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
          expect((await mustGet(saga, 'o-1')).version).toBe(1);
        });
      });

      describe('when the state is plain JSON', () => {
        it('returns an equal copy that shares nothing with the caller', async () => {
          const saga = sagaName('json');
          const state = {
            text: 'Zoë 🚚 "quoted" \\ back',
            n: 12.5,
            big: Number.MAX_SAFE_INTEGER,
            neg: -3,
            flag: true,
            none: null,
            list: [1, 'two', { three: [3] }],
            nested: { deeper: { deepest: [] as unknown[] } },
            empty: {},
          };
          await store.save(write(saga, 'o-1', { state }), 0);
          const loaded = await mustGet(saga, 'o-1');
          expect(loaded.state).toEqual(state);
          (loaded.state as typeof state).list.push(4);
          state.n = 0;
          expect((await mustGet(saga, 'o-1')).state).toEqual({ ...state, n: 12.5 });
        });

        it('returns what JSON makes of other values (a Date as its ISO string, undefined fields dropped)', async () => {
          const saga = sagaName('json-lossy');
          await store.save(write(saga, 'o-1', { state: { at: new Date(T0), gone: undefined } }), 0);
          expect((await mustGet(saga, 'o-1')).state).toEqual({ at: new Date(T0).toISOString() });
        });
      });

      describe('when the input is invalid', () => {
        it('rejects with invalid-argument and stores nothing', async () => {
          const saga = sagaName('invalid');
          const cyclic: Record<string, unknown> = {};
          cyclic['self'] = cyclic;
          const bad: [SagaWrite, number][] = [
            [write(saga, 'o-1', { state: cyclic }), 0],
            [write(saga, 'o-1', { state: undefined }), 0],
            [write(saga, 'o-1'), -1],
            [write(saga, 'o-1'), 1.5],
            [write(saga, ''), 0],
            [write('', 'o-1'), 0],
            [write(saga, 'o-1', { status: 'done' as SagaStatus }), 0],
            [write(saga, 'o-1', { stateVersion: 0 }), 0],
            [write(saga, 'o-1', { stateVersion: 2.5 }), 0],
          ];
          for (const [input, expectedVersion] of bad) {
            expectCode(await failureOf(() => store.save(input, expectedVersion)), 'invalid-argument');
          }
          expect(await store.get(saga, 'o-1')).toBeUndefined();
        });
      });

      describe('when the saga completes', () => {
        it('sets completedAt to the completing save, keeps it on later saves, and drops it on reopening', async () => {
          const saga = sagaName('complete');
          await store.save(write(saga, 'o-1'), 0);
          const completed = await store.save(write(saga, 'o-1', { status: 'completed', now: T0 + 5 }), 1);
          expect(completed).toMatchObject({ status: 'completed', completedAt: T0 + 5, version: 2 });
          const again = await store.save(write(saga, 'o-1', { status: 'completed', now: T0 + 9 }), 2);
          expect(again).toMatchObject({ completedAt: T0 + 5, updatedAt: T0 + 9 });
          const reopened = await store.save(write(saga, 'o-1', { now: T0 + 12 }), 3);
          expect(reopened.status).toBe('active');
          expect(reopened).not.toHaveProperty('completedAt');
          expect(await store.get(saga, 'o-1')).toEqual(reopened);
        });
      });
    });

    describe('state version', () => {
      it('round-trips through save, get and list, replaced by each save', async () => {
        const saga = sagaName('state-version');
        const created = await store.save(write(saga, 'o-1', { stateVersion: 3 }), 0);
        expect(created.stateVersion).toBe(3);
        expect((await mustGet(saga, 'o-1')).stateVersion).toBe(3);
        expect((await store.list({ saga })).instances.map((i) => i.stateVersion)).toEqual([3]);
        const raised = await store.save(write(saga, 'o-1', { stateVersion: 4, now: T0 + 1 }), 1);
        expect(raised.stateVersion).toBe(4);
        expect((await mustGet(saga, 'o-1')).stateVersion).toBe(4);
        expect((await store.list({ saga })).instances.map((i) => i.stateVersion)).toEqual([4]);
      });

      it('reads back as 1 for an instance saved without one', async () => {
        const saga = sagaName('state-version-default');
        const created = await store.save(write(saga, 'o-1'), 0);
        expect(created.stateVersion).toBe(1);
        expect((await mustGet(saga, 'o-1')).stateVersion).toBe(1);
        expect((await store.list({ saga })).instances.map((i) => i.stateVersion)).toEqual([1]);
      });
    });

    describe('applied steps', () => {
      /** A step saved at `T0 + count` that recorded `count` messages, bodies with text JSON must escape. */
      const step = (message: string, count = 1): SagaAppliedStep => ({
        message,
        outgoing: Array.from({ length: count }, (_, n) => ({
          id: `${message}-out-${n}`,
          kind: 'event' as const,
          type: 'orders.OrderReady',
          body: JSON.stringify({ orderId: 'o-1', note: 'Zoë 🚚 "quoted"', n }),
          partitionKey: 'o-1',
        })),
        at: T0 + count,
      });

      it('round-trips them beside the state, which holds only what the write gave as state', async () => {
        const saga = sagaName('applied');
        const applied = [step('m-1'), step('m-2', 3)];
        const created = await store.save(write(saga, 'o-1', { state: { paid: true }, applied }), 0);
        expect(created.state).toEqual({ paid: true });
        expect(created.applied).toEqual(applied);
        const loaded = await mustGet(saga, 'o-1');
        expect(loaded.state).toEqual({ paid: true });
        expect(loaded.applied).toEqual(applied);
      });

      it('replaces them with each save, and stores [] when a write leaves them out', async () => {
        const saga = sagaName('applied-replace');
        await store.save(write(saga, 'o-1', { applied: [step('m-1')] }), 0);
        const second = await store.save(write(saga, 'o-1', { applied: [step('m-2'), step('m-3')] }), 1);
        expect(second.applied.map((a) => a.message)).toEqual(['m-2', 'm-3']);
        expect((await mustGet(saga, 'o-1')).applied).toEqual(second.applied);
        const third = await store.save(write(saga, 'o-1', { state: { step: 3 } }), 2);
        expect(third.applied).toEqual([]);
        expect(await mustGet(saga, 'o-1')).toMatchObject({ applied: [], state: { step: 3 } });
      });

      it('keeps them as JSON: a copy sharing nothing, undefined fields dropped', async () => {
        const saga = sagaName('applied-json');
        const applied = [step('m-1')];
        const withUndefined = {
          message: 'm-2',
          outgoing: [{ id: 'x', kind: 'event' as const, type: 'x.Y', body: '{}', topic: undefined }],
        };
        await store.save(write(saga, 'o-1', { applied: [...applied, withUndefined] }), 0);
        const loaded = await mustGet(saga, 'o-1');
        expect(loaded.applied).toEqual([
          ...applied,
          { message: 'm-2', outgoing: [{ id: 'x', kind: 'event', type: 'x.Y', body: '{}' }] },
        ]);
        expect(loaded.applied[1]?.outgoing[0]).not.toHaveProperty('topic');
        (applied[0]?.outgoing as unknown[]).length = 0;
        expect((await mustGet(saga, 'o-1')).applied[0]?.outgoing).toHaveLength(1);
      });

      it('refuses applied steps JSON cannot hold, or of another shape, with invalid-argument', async () => {
        const saga = sagaName('applied-invalid');
        const cyclic: Record<string, unknown> = { message: 'm-1' };
        cyclic['outgoing'] = [cyclic];
        const bad = [
          [cyclic],
          [{ message: 'm-1' }],
          [{ message: 1, outgoing: [] }],
          [{ message: 'm-1', outgoing: [], at: 'yesterday' }],
          [null],
          { message: 'm-1', outgoing: [] },
        ] as unknown as SagaAppliedStep[][];
        for (const applied of bad) {
          expectCode(
            await failureOf(() => store.save(write(saga, 'o-1', { applied }), 0)),
            'invalid-argument',
          );
        }
        expect(await store.get(saga, 'o-1')).toBeUndefined();
      });
    });

    describe('.get', () => {
      it('returns undefined for an instance never saved', async () => {
        expect(await store.get(sagaName('none'), 'o-1')).toBeUndefined();
      });

      it('tells apart names and ids that would join to the same text', async () => {
        const saga = sagaName('join');
        await store.save(write(`${saga}:a`, 'b', { state: { which: 1 } }), 0);
        await store.save(write(saga, 'a:b', { state: { which: 2 } }), 0);
        expect((await mustGet(`${saga}:a`, 'b')).state).toEqual({ which: 1 });
        expect((await mustGet(saga, 'a:b')).state).toEqual({ which: 2 });
      });
    });

    describe('completed retention', () => {
      beforeEach(async () => {
        await cleanup?.();
        await store.close();
        await open(RETENTION_MS);
      });

      it('removes a completed instance once its retention ran out, and keeps active ones', async () => {
        const saga = sagaName('retention');
        await store.save(write(saga, 'done'), 0);
        await store.save(write(saga, 'active'), 0);
        await store.save(write(saga, 'done', { status: 'completed' }), 1);
        expect((await mustGet(saga, 'done')).status).toBe('completed');
        expect(positions((await store.list({ saga })).instances)).toEqual([`${saga}/active`, `${saga}/done`]);

        clock.advance(RETENTION_MS);
        await expect
          .poll(() => store.get(saga, 'done'), { timeout: RETENTION_MS + 5000, interval: 25 })
          .toBeUndefined();
        expect(positions((await store.list({ saga })).instances)).toEqual([`${saga}/active`]);
        expect((await mustGet(saga, 'active')).status).toBe('active');
        // Once gone, the id is free again.
        expect((await store.save(write(saga, 'done'), 0)).version).toBe(1);
      });
    });

    describe('.list', () => {
      it('returns instances ordered by saga name then id, filtered, over pages', async () => {
        const a = sagaName('list-a');
        const b = `${a}.b`;
        const ids = ['o-3', 'o-1', 'o-10', 'o-2', 'é-1'];
        for (const id of ids) await store.save(write(a, id), 0);
        for (const id of ['x-2', 'x-1']) await store.save(write(b, id), 0);
        await store.save(write(a, 'o-2', { status: 'completed' }), 1);
        await store.save(write(b, 'x-1', { status: 'completed' }), 1);

        const everyA = [`${a}/o-1`, `${a}/o-10`, `${a}/o-2`, `${a}/o-3`, `${a}/é-1`];
        const onePage = await store.list({ saga: a });
        expect(positions(onePage.instances)).toEqual(everyA);
        expect(onePage.next).toBeUndefined();

        const pages = await allPages({ saga: a }, 2);
        expect(pages.map((page) => page.length)).toEqual([2, 2, 1]);
        expect(positions(pages.flat())).toEqual(everyA);

        expect(positions((await store.list({ saga: a, status: 'completed' })).instances)).toEqual([
          `${a}/o-2`,
        ]);
        expect(positions((await allPages({ saga: a, status: 'active' }, 1)).flat())).toEqual(
          everyA.filter((p) => p !== `${a}/o-2`),
        );

        // Without a saga filter the other tests' instances may be listed too (a shared server).
        const mine = (await allPages({ status: 'completed' }, 3)).flat().filter((i) => i.saga.startsWith(a));
        expect(positions(mine)).toEqual([`${a}/o-2`, `${b}/x-1`]);
        const all = (await allPages({}, 4)).flat().filter((i) => i.saga.startsWith(a));
        expect(positions(all)).toEqual([...everyA, `${b}/x-1`, `${b}/x-2`]);
      });

      it('returns an empty last page for a saga with no instances', async () => {
        expect(await store.list({ saga: sagaName('empty') })).toEqual({ instances: [] });
      });

      it('returns instances equal to what get returns, without their applied steps', async () => {
        const saga = sagaName('list-full');
        const timeouts = [{ id: 't', type: 'x.T', dueAt: T0 + 5 }];
        const applied = [{ message: 'm-1', outgoing: [], at: T0 }];
        await store.save(write(saga, 'o-1', { state: { deep: [1] }, timeouts, applied }), 0);
        const { applied: _applied, ...summary } = await mustGet(saga, 'o-1');
        const { instances } = await store.list({ saga });
        expect(instances).toEqual([summary]);
        expect(instances[0]).not.toHaveProperty('applied');
      });

      it('rejects a cursor it did not issue with invalid-cursor, and a bad limit with invalid-argument', async () => {
        expectCode(await failureOf(() => store.list({}, { cursor: 'not-a-cursor' })), 'invalid-cursor');
        for (const limit of [0, -1, 1.5]) {
          expectCode(await failureOf(() => store.list({}, { limit })), 'invalid-argument');
        }
      });
    });

    describe('.remove', () => {
      it('deletes the instance, says whether it existed, and frees the id', async () => {
        const saga = sagaName('remove');
        await store.save(write(saga, 'o-1'), 0);
        await store.save(write(saga, 'o-2'), 0);
        expect(await store.remove(saga, 'o-1')).toBe(true);
        expect(await store.remove(saga, 'o-1')).toBe(false);
        expect(await store.get(saga, 'o-1')).toBeUndefined();
        expect(positions((await store.list({ saga })).instances)).toEqual([`${saga}/o-2`]);
        expect((await store.save(write(saga, 'o-1'), 0)).version).toBe(1);
      });
    });

    describe('.close', () => {
      it('makes every later call reject with store-closed, and closing twice is harmless', async () => {
        const saga = sagaName('closed');
        await store.close();
        await store.close();
        expectCode(await failureOf(() => store.get(saga, 'o-1')), 'store-closed');
        expectCode(await failureOf(() => store.save(write(saga, 'o-1'), 0)), 'store-closed');
        expectCode(await failureOf(() => store.list()), 'store-closed');
        expectCode(await failureOf(() => store.remove(saga, 'o-1')), 'store-closed');
      });
    });
  });
}
