import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  HarrierError,
  InMemoryScheduleStore,
  ManualClock,
  SCHEDULE_TICK_HEADER,
  defineCommand,
  silentLogger,
  tickMessageId,
  type Clock,
  type SendOptions,
} from '../../../src/index.js';
import { RecurringSchedules } from '../../../src/schedules/recurring-schedules.js';

const CloseDay = defineCommand('test.CloseDay', { schema: z.object({ ledger: z.string() }) });
const Ping = defineCommand('test.Ping', { schema: z.object({}), dedupe: 'while-queued' });

interface Sent {
  readonly id: string;
  readonly tick: string;
  readonly payload: unknown;
}

/** One process's schedules, sending into `sent`, on a shared store and clock. */
function processOf(clock: ManualClock, store: InMemoryScheduleStore, sent: Sent[]): RecurringSchedules {
  return new RecurringSchedules({
    store,
    clock,
    logger: silentLogger,
    send: (_definition, payload, options: SendOptions) => {
      sent.push({ id: options.id ?? '', tick: options.headers?.[SCHEDULE_TICK_HEADER] ?? '', payload });
      return Promise.resolve(options.id ?? '');
    },
    check: (definition, payload) => {
      definition.schema.parse(payload);
    },
  });
}

/** Fires every timer due by `timeMs`, one at a time, letting each tick finish before the next. */
async function runTo(clock: ManualClock, store: InMemoryScheduleStore, timeMs: number): Promise<void> {
  for (;;) {
    const at = clock.nextTimerAt();
    if (at === undefined || at > timeMs) break;
    clock.advanceTo(at);
    // A tick ends by arming the next one (or by recording nothing left to arm).
    await vi.waitFor(async () => {
      const records = await store.list();
      if (records.length > 0 && clock.nextTimerAt() === undefined) throw new Error('tick in progress');
    });
  }
  clock.advanceTo(timeMs);
}

const ticksOf = (sent: readonly Sent[]): string[] => sent.map((s) => s.tick);

describe('RecurringSchedules', () => {
  describe('.every', () => {
    it('sends one message per interval tick, its id derived from the name and the tick', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 0, 100));
      const store = new InMemoryScheduleStore();
      const sent: Sent[] = [];
      const schedules = processOf(clock, store, sent);
      await schedules.every('close', { everyMs: 1000 }, CloseDay, { ledger: 'eu' });
      await schedules.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 0, 3, 500));
      expect(ticksOf(sent)).toEqual([
        '2026-01-01T00:00:01.000Z',
        '2026-01-01T00:00:02.000Z',
        '2026-01-01T00:00:03.000Z',
      ]);
      expect(sent.map((s) => s.id)).toEqual(
        [1, 2, 3].map((s) => tickMessageId('close', Date.UTC(2026, 0, 1, 0, 0, s))),
      );
      expect(new Set(sent.map((s) => s.id)).size).toBe(3);
      const record = await store.get('close');
      expect(record?.lastTickAt).toBe(Date.UTC(2026, 0, 1, 0, 0, 3));
      expect(record?.nextRunAt).toBe(Date.UTC(2026, 0, 1, 0, 0, 4));
      await schedules.stop();
    });

    it('gives every process the same id for a tick, and one of them records it', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1));
      const store = new InMemoryScheduleStore();
      const sent: Sent[] = [];
      const processes = [
        processOf(clock, store, sent),
        processOf(clock, store, sent),
        processOf(clock, store, sent),
      ];
      for (const p of processes) {
        await p.every('close', { everyMs: 1000 }, CloseDay, { ledger: 'eu' });
        await p.start();
      }
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 0, 5));
      // Each id may be sent by more than one process (the broker keeps one); no tick is missing.
      expect([...new Set(sent.map((s) => s.id))]).toEqual(
        [1, 2, 3, 4, 5].map((s) => tickMessageId('close', Date.UTC(2026, 0, 1, 0, 0, s))),
      );
      expect((await store.get('close'))?.lastTickAt).toBe(Date.UTC(2026, 0, 1, 0, 0, 5));
      for (const p of processes) await p.stop();
    });

    it('refuses a definition deduplicated only while queued', async () => {
      const schedules = processOf(new ManualClock(), new InMemoryScheduleStore(), []);
      await expect(schedules.every('ping', { everyMs: 1000 }, Ping, {})).rejects.toSatisfy(
        (error) =>
          HarrierError.is(error) && error.code === 'invalid-option' && /while-queued/.test(error.message),
      );
    });

    it('refuses a malformed cron, an unknown time zone and a tiny interval, naming the fix', async () => {
      const schedules = processOf(new ManualClock(), new InMemoryScheduleStore(), []);
      for (const [timing, words] of [
        [{ cron: 'every day' }, /5 fields/],
        [{ cron: '0 2 * * *', timeZone: 'Mars/Olympus' }, /IANA/],
        [{ everyMs: 1 }, /at least 10/],
      ] as const) {
        await expect(schedules.every('bad', timing, CloseDay, { ledger: 'eu' })).rejects.toSatisfy(
          (error) => HarrierError.is(error) && error.code === 'invalid-option' && words.test(error.message),
        );
      }
    });

    it('replaces a schedule of the same name, in this process and in the others', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1));
      const store = new InMemoryScheduleStore();
      const sentA: Sent[] = [];
      const sentB: Sent[] = [];
      const a = processOf(clock, store, sentA);
      const b = processOf(clock, store, sentB);
      await a.every('close', { everyMs: 1000 }, CloseDay, { ledger: 'eu' });
      await b.every('close', { everyMs: 1000 }, CloseDay, { ledger: 'eu' });
      await a.start();
      await b.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 0, 1));
      await a.every('close', { everyMs: 5000 }, CloseDay, { ledger: 'us' });
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 0, 10));
      // b sends the 2 s tick of the old schedule (the change reaches it at that tick), then the new one.
      const after = [...sentA, ...sentB].filter((s) => s.tick > '2026-01-01T00:00:01.000Z');
      expect([...new Set(after.map((s) => `${s.tick} ${JSON.stringify(s.payload)}`))].sort()).toEqual([
        '2026-01-01T00:00:05.000Z {"ledger":"us"}',
        '2026-01-01T00:00:10.000Z {"ledger":"us"}',
      ]);
      expect((await store.get('close'))?.everyMs).toBe(5000);
      await a.stop();
      await b.stop();
    });
  });

  describe('when a timer fires late (a busy event loop)', () => {
    /** A clock that reads `late` ms ahead of the manual clock whose timers it uses. */
    function lateClock(clock: ManualClock): { clock: Clock; setLate: (ms: number) => void } {
      let late = 0;
      return {
        clock: { now: () => clock.now() + late, setTimer: (ms, callback) => clock.setTimer(ms, callback) },
        setLate: (ms) => {
          late = ms;
        },
      };
    }

    async function lateTicks(lateMs: number, catchUp: 'one' | 'none'): Promise<string[]> {
      const manual = new ManualClock(Date.UTC(2026, 0, 1));
      const { clock, setLate } = lateClock(manual);
      const store = new InMemoryScheduleStore();
      const sent: Sent[] = [];
      const schedules = new RecurringSchedules({
        store,
        clock,
        logger: silentLogger,
        send: (_definition, _payload, options: SendOptions) => {
          sent.push({
            id: options.id ?? '',
            tick: options.headers?.[SCHEDULE_TICK_HEADER] ?? '',
            payload: null,
          });
          return Promise.resolve(options.id ?? '');
        },
        check: () => undefined,
      });
      await schedules.every('close', { everyMs: 1000 }, CloseDay, { ledger: 'eu' }, { catchUp });
      await schedules.start();
      // The 1 s tick's timer fires when the time read is already `lateMs` past it.
      setLate(lateMs);
      await runTo(manual, store, Date.UTC(2026, 0, 1, 0, 0, 1));
      await schedules.stop();
      return ticksOf(sent);
    }

    it('sends each tick it is late for, in turn, when less than a minute late', async () => {
      expect(await lateTicks(2_500, 'none')).toEqual([
        '2026-01-01T00:00:01.000Z',
        '2026-01-01T00:00:02.000Z',
        '2026-01-01T00:00:03.000Z',
      ]);
    });

    it("counts ticks over a minute late as missed: catchUp 'one' sends the latest", async () => {
      expect(await lateTicks(90_500, 'one')).toEqual(['2026-01-01T00:01:31.000Z']);
    });

    it("counts ticks over a minute late as missed: catchUp 'none' sends none", async () => {
      expect(await lateTicks(90_500, 'none')).toEqual([]);
    });
  });

  describe('.cancel', () => {
    it('stops the schedule here and in the other processes, and removes it from the store', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1));
      const store = new InMemoryScheduleStore();
      const sent: Sent[] = [];
      const a = processOf(clock, store, sent);
      const b = processOf(clock, store, sent);
      await a.every('close', { everyMs: 1000 }, CloseDay, { ledger: 'eu' });
      await b.every('close', { everyMs: 1000 }, CloseDay, { ledger: 'eu' });
      await a.start();
      await b.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 0, 2));
      expect(await a.cancel('close')).toBe(true);
      expect(await store.get('close')).toBeUndefined();
      const before = sent.length;
      clock.advanceTo(Date.UTC(2026, 0, 1, 0, 0, 3));
      // b reads the store at its 3 s tick, finds the schedule gone, and arms nothing more.
      await vi.waitFor(() => {
        expect(b.names()).toEqual([]);
      });
      clock.advanceTo(Date.UTC(2026, 0, 1, 0, 1));
      expect(sent.length).toBe(before);
      expect(clock.nextTimerAt()).toBeUndefined();
      expect(await a.cancel('close')).toBe(false);
    });
  });

  describe('.start', () => {
    async function restartAfterOutage(
      catchUp: 'one' | 'none',
    ): Promise<{ sent: Sent[]; store: InMemoryScheduleStore }> {
      const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 30));
      const store = new InMemoryScheduleStore();
      const before: Sent[] = [];
      const first = processOf(clock, store, before);
      await first.every('close', { cron: '0 * * * *' }, CloseDay, { ledger: 'eu' }, { catchUp });
      await first.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 1, 30));
      expect(ticksOf(before)).toEqual(['2026-01-01T01:00:00.000Z']);
      await first.stop();
      // Every process down from 01:30 to 04:10: the 02:00, 03:00 and 04:00 ticks are missed.
      clock.advanceTo(Date.UTC(2026, 0, 1, 4, 10));
      const sent: Sent[] = [];
      const second = processOf(clock, store, sent);
      await second.every('close', { cron: '0 * * * *' }, CloseDay, { ledger: 'eu' }, { catchUp });
      await second.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 5, 30));
      await second.stop();
      return { sent, store };
    }

    it("with catchUp 'one', sends the latest missed tick once, then ticks on", async () => {
      const { sent, store } = await restartAfterOutage('one');
      expect(ticksOf(sent)).toEqual(['2026-01-01T04:00:00.000Z', '2026-01-01T05:00:00.000Z']);
      expect(sent[0]?.id).toBe(tickMessageId('close', Date.UTC(2026, 0, 1, 4)));
      expect((await store.get('close'))?.lastTickAt).toBe(Date.UTC(2026, 0, 1, 5));
    });

    it("with catchUp 'none', skips the missed ticks", async () => {
      const { sent } = await restartAfterOutage('none');
      expect(ticksOf(sent)).toEqual(['2026-01-01T05:00:00.000Z']);
    });

    it('catches up nothing for a schedule replaced with another timing', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 30));
      const store = new InMemoryScheduleStore();
      const first = processOf(clock, store, []);
      await first.every('close', { cron: '0 * * * *' }, CloseDay, { ledger: 'eu' });
      await first.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 1, 30));
      await first.stop();
      clock.advanceTo(Date.UTC(2026, 0, 1, 4, 10));
      const sent: Sent[] = [];
      const second = processOf(clock, store, sent);
      await second.every('close', { cron: '30 * * * *' }, CloseDay, { ledger: 'eu' });
      await second.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 4, 45));
      expect(ticksOf(sent)).toEqual(['2026-01-01T04:30:00.000Z']);
      await second.stop();
    });
  });

  describe('daylight-saving changes (Europe/Berlin, 30 2 * * *)', () => {
    async function dailyTicks(fromIso: string, toIso: string): Promise<string[]> {
      const clock = new ManualClock(Date.parse(fromIso));
      const store = new InMemoryScheduleStore();
      const sent: Sent[] = [];
      const schedules = processOf(clock, store, sent);
      await schedules.every('nightly', { cron: '30 2 * * *', timeZone: 'Europe/Berlin' }, CloseDay, {
        ledger: 'eu',
      });
      await schedules.start();
      await runTo(clock, store, Date.parse(toIso));
      await schedules.stop();
      return ticksOf(sent);
    }

    it('runs at 03:00 CEST on the spring-forward day, when 02:30 does not exist', async () => {
      expect(await dailyTicks('2026-03-27T12:00:00Z', '2026-03-30T12:00:00Z')).toEqual([
        '2026-03-28T01:30:00.000Z', // 02:30 CET
        '2026-03-29T01:00:00.000Z', // 03:00 CEST
        '2026-03-30T00:30:00.000Z', // 02:30 CEST
      ]);
    });

    it('runs once, at the first 02:30 (CEST), on the fall-back day', async () => {
      expect(await dailyTicks('2026-10-24T12:00:00Z', '2026-10-26T12:00:00Z')).toEqual([
        '2026-10-25T00:30:00.000Z', // 02:30 CEST; the second 02:30 (CET, 01:30Z) sends nothing
        '2026-10-26T01:30:00.000Z', // 02:30 CET
      ]);
    });
  });

  describe("when a tick's send fails (the broker is down)", () => {
    it('records the failure as lastError, tries again, and the retry that sends records the message id', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 30));
      const store = new InMemoryScheduleStore();
      const sent: string[] = [];
      let down = false;
      const schedules = new RecurringSchedules({
        store,
        clock,
        logger: silentLogger,
        send: (_definition, _payload, options: SendOptions) => {
          if (down) return Promise.reject(new Error('Redis is unreachable at 127.0.0.1:6379'));
          sent.push(options.id ?? '');
          return Promise.resolve(options.id ?? '');
        },
        check: () => undefined,
      });
      await schedules.every('close', { cron: '* * * * *' }, CloseDay, { ledger: 'eu' });
      await schedules.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 1, 30));
      const first = tickMessageId('close', Date.UTC(2026, 0, 1, 0, 1));
      expect(await store.get('close')).toMatchObject({ lastMessageId: first, lastError: undefined });

      down = true;
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 2, 1));
      // The 00:02 tick failed at 00:02:00 and is tried again 5 s later; the 00:01 tick stays the last sent.
      expect(await store.get('close')).toMatchObject({
        lastTickAt: Date.UTC(2026, 0, 1, 0, 1),
        lastMessageId: first,
        lastError: {
          message: 'Redis is unreachable at 127.0.0.1:6379',
          at: Date.UTC(2026, 0, 1, 0, 2),
        },
      });
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 2, 6));
      expect((await store.get('close'))?.lastError?.at).toBe(Date.UTC(2026, 0, 1, 0, 2, 5));

      down = false;
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 2, 11));
      const second = tickMessageId('close', Date.UTC(2026, 0, 1, 0, 2));
      expect(sent).toEqual([first, second]);
      const record = await store.get('close');
      expect(record?.lastTickAt).toBe(Date.UTC(2026, 0, 1, 0, 2));
      expect(record?.lastMessageId).toBe(second);
      expect(record?.lastError).toBeUndefined();
      await schedules.stop();
    });

    it('keeps the outcome when every() stores the same schedule again, and drops it for a new one', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 30));
      const store = new InMemoryScheduleStore();
      const schedules = processOf(clock, store, []);
      await schedules.every('close', { cron: '* * * * *' }, CloseDay, { ledger: 'eu' });
      await schedules.start();
      await runTo(clock, store, Date.UTC(2026, 0, 1, 0, 1, 30));
      await store.recordTickFailure('close', Date.UTC(2026, 0, 1, 0, 2), { message: 'down', at: 1 });
      await schedules.every('close', { cron: '* * * * *' }, CloseDay, { ledger: 'eu' });
      expect(await store.get('close')).toMatchObject({
        lastMessageId: tickMessageId('close', Date.UTC(2026, 0, 1, 0, 1)),
        lastError: { message: 'down', at: 1 },
      });
      await schedules.every('close', { cron: '* * * * *' }, CloseDay, { ledger: 'us' });
      const replaced = await store.get('close');
      expect([replaced?.lastMessageId, replaced?.lastError]).toEqual([undefined, undefined]);
      await schedules.stop();
    });
  });
});
