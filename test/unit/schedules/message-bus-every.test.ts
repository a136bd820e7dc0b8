import 'reflect-metadata';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  InMemoryBroker,
  InMemoryScheduleStore,
  ManualClock,
  SCHEDULE_HEADER,
  createBus,
  defineCommand,
  defineQuery,
  silentLogger,
  tickMessageId,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import type { OutgoingMessage } from '../../../src/broker/message-broker.js';

const CloseDay = defineCommand('test.every.CloseDay', { schema: z.object({ ledger: z.string() }) });
const GetDay = defineQuery('test.every.GetDay', { schema: z.object({}), result: z.string() });

const handled: { id: string; schedule: string | undefined; ledger: string }[] = [];

@CommandHandler(CloseDay)
class CloseDayHandler {
  handle(payload: PayloadOf<typeof CloseDay>, context: MessageContext): void {
    handled.push({
      id: context.messageId,
      schedule: context.headers[SCHEDULE_HEADER],
      ledger: payload.ledger,
    });
  }
}

/** An in-memory broker that refuses every publish while `down`, as one whose server is unreachable. */
class FlakyBroker extends InMemoryBroker {
  down = false;

  override publish(message: OutgoingMessage): Promise<void> {
    if (this.down) return Promise.reject(new Error('broker unreachable (test)'));
    return super.publish(message);
  }
}

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
  handled.length = 0;
});

describe('MessageBus', () => {
  describe('.every', () => {
    it('sends the command on each tick to its handler, once started', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1));
      const store = new InMemoryScheduleStore();
      bus = createBus({
        handlers: [CloseDayHandler],
        clock,
        broker: new InMemoryBroker({ clock }),
        scheduleStore: store,
        logger: silentLogger,
      });
      await bus.every('close', { everyMs: 60_000 }, CloseDay, { ledger: 'eu' });
      expect((await store.get('close'))?.nextRunAt).toBe(Date.UTC(2026, 0, 1, 0, 1));
      clock.advanceTo(Date.UTC(2026, 0, 1, 0, 1));
      // Not started: the tick fires nothing.
      expect(clock.nextTimerAt()).toBeUndefined();
      await bus.start();
      for (const minute of [2, 3]) {
        clock.advanceTo(Date.UTC(2026, 0, 1, 0, minute));
        await vi.waitFor(() => {
          expect(handled).toHaveLength(minute - 1);
        });
      }
      expect(handled).toEqual(
        [2, 3].map((m) => ({
          id: tickMessageId('close', Date.UTC(2026, 0, 1, 0, m)),
          schedule: 'close',
          ledger: 'eu',
        })),
      );
    });

    it("records a tick's failed send as lastError, and the message id once a retry sends it", async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1));
      const store = new InMemoryScheduleStore();
      const broker = new FlakyBroker({ clock });
      bus = createBus({
        handlers: [CloseDayHandler],
        clock,
        broker,
        scheduleStore: store,
        logger: silentLogger,
      });
      await bus.every('close', { everyMs: 60_000 }, CloseDay, { ledger: 'eu' });
      await bus.start();
      broker.down = true;
      clock.advanceTo(Date.UTC(2026, 0, 1, 0, 1));
      await vi.waitFor(async () => {
        expect((await store.get('close'))?.lastError).toEqual({
          message: 'broker unreachable (test)',
          at: Date.UTC(2026, 0, 1, 0, 1),
        });
      });
      expect((await store.get('close'))?.lastTickAt).toBeUndefined();
      expect(handled).toEqual([]);

      broker.down = false;
      // The retry, 5 s later.
      clock.advanceTo(Date.UTC(2026, 0, 1, 0, 1, 5));
      const id = tickMessageId('close', Date.UTC(2026, 0, 1, 0, 1));
      await vi.waitFor(() => {
        expect(handled.map((h) => h.id)).toEqual([id]);
      });
      await vi.waitFor(async () => {
        const record = await store.get('close');
        expect(record?.lastMessageId).toBe(id);
        expect(record?.lastError).toBeUndefined();
      });
    });

    it('refuses a query and a payload its schema rejects, and stores nothing', async () => {
      const store = new InMemoryScheduleStore();
      bus = createBus({ handlers: [CloseDayHandler], scheduleStore: store, logger: silentLogger });
      await expect(bus.every('q', { everyMs: 1000 }, GetDay as never, {} as never)).rejects.toMatchObject({
        code: 'wrong-kind',
      });
      await expect(
        bus.every('bad', { everyMs: 1000 }, CloseDay, { ledger: 3 } as never),
      ).rejects.toMatchObject({
        code: 'validation-failed',
      });
      expect(await store.list()).toEqual([]);
    });
  });

  describe('.cancelEvery', () => {
    it('removes the schedule: no tick after it', async () => {
      const clock = new ManualClock(Date.UTC(2026, 0, 1));
      const store = new InMemoryScheduleStore();
      bus = createBus({
        handlers: [CloseDayHandler],
        clock,
        broker: new InMemoryBroker({ clock }),
        scheduleStore: store,
        logger: silentLogger,
      });
      await bus.start();
      await bus.every('close', { everyMs: 60_000 }, CloseDay, { ledger: 'eu' });
      expect(await bus.cancelEvery('close')).toBe(true);
      clock.advanceTo(Date.UTC(2026, 0, 1, 1));
      expect(await store.list()).toEqual([]);
      expect(handled).toEqual([]);
      expect(await bus.cancelEvery('close')).toBe(false);
    });
  });
});
