import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ScheduleRecord } from '../schedules/schedule-record.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';

/** A store made fresh for one conformance test, and how to tidy up after it. */
export interface ScheduleStoreFixture {
  /** The store to test; the suite closes it after each test. */
  readonly store: ScheduleStore;
  /** Runs after the store is closed, e.g. to delete the test's Redis keys or PostgreSQL schema. */
  readonly cleanup?: () => Promise<void>;
}

/** Makes a fresh fixture for one test. */
export type ScheduleStoreFactory = () => Promise<ScheduleStoreFixture>;

const T0 = Date.UTC(2026, 0, 1);

/**
 * Registers the vitest suite that every {@link ScheduleStore} must pass.
 *
 * @remarks
 * Each test gets a fresh store from `factory` and names of its own. After each test the suite
 * closes the store, then awaits `cleanup`.
 *
 * @example
 * ```ts
 * describeScheduleStoreConformance('MyScheduleStore', async () => ({ store: new MyScheduleStore() }));
 * ```
 */
export function describeScheduleStoreConformance(name: string, factory: ScheduleStoreFactory): void {
  describe(`ScheduleStore conformance: ${name}`, () => {
    let store: ScheduleStore;
    let cleanup: (() => Promise<void>) | undefined;
    let prefix: string;

    beforeEach(async () => {
      const fixture = await factory();
      store = fixture.store;
      cleanup = fixture.cleanup;
      prefix = `conformance.${randomUUID()}.`;
    });

    afterEach(async () => {
      await store.close();
      await cleanup?.();
    });

    const recordOf = (name: string, overrides: Partial<ScheduleRecord> = {}): ScheduleRecord => ({
      name,
      kind: 'command',
      type: 'billing.CloseDay',
      payload: { ledger: 'eu', tags: [], nested: { empty: {} } },
      cron: '30 2 * * *',
      timeZone: 'Europe/Berlin',
      everyMs: undefined,
      catchUp: 'one',
      lastTickAt: undefined,
      nextRunAt: T0 + 60_000,
      updatedAt: T0,
      ...overrides,
    });

    it('.put then .get returns the record as stored, payload unchanged', async () => {
      const record = recordOf(`${prefix}a`);
      await store.put(record);
      expect(await store.get(record.name)).toEqual(record);
      expect(await store.get(`${prefix}missing`)).toBeUndefined();
    });

    it('.put replaces a record of the same name, last tick included', async () => {
      await store.put(recordOf(`${prefix}a`, { lastTickAt: T0 }));
      const replacement = recordOf(`${prefix}a`, {
        cron: undefined,
        timeZone: undefined,
        everyMs: 5000,
        catchUp: 'none',
      });
      await store.put(replacement);
      expect(await store.get(`${prefix}a`)).toEqual(replacement);
    });

    it('.put then .get returns the last message id and the last error as stored', async () => {
      const record = recordOf(`${prefix}a`, {
        lastTickAt: T0,
        lastMessageId: '01940000-0000-7000-8000-000000000001',
        lastError: { message: 'Redis is unreachable: "quoted", \u00e9, new\nline', at: T0 + 61_000 },
      });
      await store.put(record);
      expect(await store.get(record.name)).toEqual(record);
      expect((await store.list()).find((r) => r.name === record.name)).toEqual(record);
      // Put again without them: both are gone.
      const cleared = recordOf(`${prefix}a`, { lastTickAt: T0 });
      await store.put(cleared);
      expect(await store.get(record.name)).toEqual(cleared);
    });

    it('.list returns every record, by name', async () => {
      await store.put(recordOf(`${prefix}b`));
      await store.put(recordOf(`${prefix}a`, { kind: 'event', type: 'billing.DayClosed' }));
      const mine = (await store.list()).filter((r) => r.name.startsWith(prefix));
      expect(mine.map((r) => [r.name, r.kind])).toEqual([
        [`${prefix}a`, 'event'],
        [`${prefix}b`, 'command'],
      ]);
    });

    it('.recordTick raises the last tick and the next run, never lowers them', async () => {
      const name = `${prefix}a`;
      await store.put(recordOf(name));
      expect(await store.recordTick(name, T0 + 1000, T0 + 2000)).toBe(true);
      expect(await store.recordTick(name, T0 + 1000, T0 + 2000)).toBe(false);
      expect(await store.recordTick(name, T0 + 500, T0 + 1000)).toBe(false);
      expect(await store.get(name)).toMatchObject({ lastTickAt: T0 + 1000, nextRunAt: T0 + 2000 });
      expect(await store.recordTick(name, T0 + 2000, undefined)).toBe(true);
      const stored = await store.get(name);
      expect(stored?.lastTickAt).toBe(T0 + 2000);
      expect(stored?.nextRunAt).toBeUndefined();
    });

    it('.recordTick keeps the message id of the tick it records', async () => {
      const name = `${prefix}a`;
      await store.put(recordOf(name));
      expect(await store.recordTick(name, T0 + 1000, T0 + 2000, 'message-1')).toBe(true);
      expect(await store.recordTick(name, T0 + 1000, T0 + 2000, 'message-other')).toBe(false);
      expect(await store.get(name)).toMatchObject({ lastTickAt: T0 + 1000, lastMessageId: 'message-1' });
      expect(await store.recordTick(name, T0 + 2000, T0 + 3000, 'message-2')).toBe(true);
      expect((await store.get(name))?.lastMessageId).toBe('message-2');
    });

    it('.recordTickFailure keeps the failure of a tick not recorded yet, until a tick is recorded', async () => {
      const name = `${prefix}a`;
      await store.put(recordOf(name));
      await store.recordTick(name, T0 + 1000, T0 + 2000, 'message-1');
      const error = { message: 'connect ECONNREFUSED 127.0.0.1:6379', at: T0 + 2005 };
      expect(await store.recordTickFailure(name, T0 + 2000, error)).toBe(true);
      expect(await store.get(name)).toMatchObject({
        lastTickAt: T0 + 1000,
        lastMessageId: 'message-1',
        lastError: error,
      });
      // A later failure of the same tick replaces it.
      const later = { message: 'still down', at: T0 + 7005 };
      expect(await store.recordTickFailure(name, T0 + 2000, later)).toBe(true);
      expect((await store.get(name))?.lastError).toEqual(later);
      // The retry that sends the tick clears it.
      expect(await store.recordTick(name, T0 + 2000, T0 + 3000, 'message-2')).toBe(true);
      const sent = await store.get(name);
      expect(sent?.lastError).toBeUndefined();
      expect(sent?.lastMessageId).toBe('message-2');
    });

    it('.recordTickFailure of a tick another process recorded, or of a schedule gone, records nothing', async () => {
      const name = `${prefix}a`;
      await store.put(recordOf(name));
      await store.recordTick(name, T0 + 2000, T0 + 3000, 'message-2');
      expect(await store.recordTickFailure(name, T0 + 2000, { message: 'down', at: T0 + 2005 })).toBe(false);
      expect(await store.recordTickFailure(name, T0 + 1000, { message: 'down', at: T0 + 2005 })).toBe(false);
      expect((await store.get(name))?.lastError).toBeUndefined();
      expect(await store.recordTickFailure(`${prefix}missing`, T0, { message: 'down', at: T0 + 5 })).toBe(
        false,
      );
      expect(await store.get(`${prefix}missing`)).toBeUndefined();
    });

    it('.recordTick of a schedule that is gone records nothing', async () => {
      expect(await store.recordTick(`${prefix}missing`, T0, T0 + 1000)).toBe(false);
      expect(await store.get(`${prefix}missing`)).toBeUndefined();
    });

    it('records one tick of many racing processes', async () => {
      const name = `${prefix}a`;
      await store.put(recordOf(name));
      const results = await Promise.all(
        Array.from({ length: 5 }, () => store.recordTick(name, T0 + 1000, T0 + 2000)),
      );
      expect(results.filter(Boolean)).toHaveLength(1);
    });

    it('.delete removes a record and says whether there was one', async () => {
      const name = `${prefix}a`;
      await store.put(recordOf(name, { lastTickAt: T0 }));
      expect(await store.delete(name)).toBe(true);
      expect(await store.get(name)).toBeUndefined();
      expect(await store.delete(name)).toBe(false);
      // A schedule stored again under the name starts without the old last tick and outcome.
      await store.recordTickFailure(name, T0 + 1000, { message: 'down', at: T0 + 1005 });
      await store.delete(name);
      await store.put(recordOf(name));
      const again = await store.get(name);
      expect([again?.lastTickAt, again?.lastMessageId, again?.lastError]).toEqual([
        undefined,
        undefined,
        undefined,
      ]);
    });
  });
}
