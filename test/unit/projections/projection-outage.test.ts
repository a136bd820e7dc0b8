import 'reflect-metadata';
import { Container, inject, injectable } from 'inversify';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  InMemoryDeadLetterStore,
  On,
  Projection,
  createBus,
  defineEvent,
  silentLogger,
  type DeadLetterRecord,
  type MessageBus,
  type PausedEvent,
  type PayloadOf,
  type ResumedEvent,
} from '../../../src/index.js';
import { InMemoryCheckpointStore, InMemoryEventLog } from '../../../src/log/index.js';

const Deposited = defineEvent('bank.Deposited', {
  schema: z.object({ account: z.string(), amount: z.number() }),
  partitionKey: 'account',
});

/** Resolves once `condition` holds, checking every few ms; fails after `timeout` ms. */
function waitFor(condition: () => boolean, timeout = 5_000): Promise<void> {
  return vi.waitFor(
    () => {
      if (!condition()) throw new Error('condition not met in time');
    },
    { timeout, interval: 2 },
  );
}

/** The read model's database: while `down`, every write fails as a lost connection does. */
@injectable()
class ReadModel {
  down = false;
  calls = 0;
  readonly totals = new Map<string, number>();
  add(account: string, amount: number): void {
    this.calls++;
    if (this.down) {
      throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    }
    this.totals.set(account, (this.totals.get(account) ?? 0) + amount);
  }
}

/** A dead-letter store that is unreachable while `down`. */
class FlakyDeadLetters extends InMemoryDeadLetterStore {
  down = false;
  failedAdds = 0;
  override add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    if (this.down) {
      this.failedAdds++;
      return Promise.reject(new Error('Connection is closed.'));
    }
    return super.add(record);
  }
}

@injectable()
@Projection('totals', { retry: { attempts: 2, immediate: 1 } })
class Totals {
  constructor(@inject(ReadModel) private readonly model: ReadModel) {}
  @On(Deposited)
  onDeposited(e: PayloadOf<typeof Deposited>): void {
    if (e.amount < 0) throw new Error(`negative amount ${e.amount}`);
    this.model.add(e.account, e.amount);
  }
}

const buses: MessageBus[] = [];
afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.stop()));
});

function setup() {
  const container = new Container();
  container.bind(ReadModel).toSelf().inSingletonScope();
  const deadLetters = new FlakyDeadLetters();
  const checkpoints = new InMemoryCheckpointStore();
  const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 2 }] });
  const paused: PausedEvent[] = [];
  const resumed: ResumedEvent[] = [];
  const bus = createBus({
    endpoint: 'reports',
    container,
    handlers: [Totals],
    definitions: [Deposited],
    eventLog: log,
    checkpoints,
    deadLetters,
    logger: silentLogger,
    outage: { probeBaseMs: 10, probeMaxMs: 40 },
    projections: { commitEvery: 1 },
    hooks: {
      onPaused: (event) => void paused.push(event),
      onResumed: (event) => void resumed.push(event),
    },
  });
  buses.push(bus);
  return { bus, log, checkpoints, deadLetters, model: container.get(ReadModel), paused, resumed };
}

describe('ProjectionRunner', () => {
  describe('when the read model is unreachable', () => {
    it('pauses the lane, skips no event and dead-letters none, and resumes where it stopped', async () => {
      const { bus, log, checkpoints, deadLetters, model, paused, resumed } = setup();
      model.down = true;
      await bus.start();
      let expected = 0;
      for (let i = 1; i <= 30; i++) {
        await bus.publish(Deposited, { account: 'a', amount: i });
        expected += i;
      }
      await waitFor(() => paused.length === 1 && model.calls >= 5);
      expect(paused[0]).toMatchObject({ endpoint: 'reports', projection: { name: 'totals', topic: 'bank' } });
      const end = await log.endOffset('bank', paused[0]!.projection!.partition);
      expect(await checkpoints.get('totals', 'bank', paused[0]!.projection!.partition)).toBeUndefined();

      model.down = false;
      await bus.projections.whenCaughtUp('totals');
      expect(model.totals.get('a')).toBe(expected);
      expect(await deadLetters.count()).toBe(0);
      expect(resumed).toHaveLength(1);
      expect(await checkpoints.get('totals', 'bank', paused[0]!.projection!.partition)).toBe(end - 1);
    });
  });

  describe('when the dead-letter store is unreachable as an event fails for good', () => {
    it('pauses the lane until the dead letter is stored, then goes on (no event passed unrecorded)', async () => {
      const { bus, deadLetters, model, paused } = setup();
      deadLetters.down = true;
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 5 });
      await bus.publish(Deposited, { account: 'a', amount: -1 });
      await bus.publish(Deposited, { account: 'a', amount: 7 });
      await waitFor(() => paused.length === 1 && deadLetters.failedAdds >= 3);
      // The event after the poison one waits behind it.
      expect(model.totals.get('a')).toBe(5);

      deadLetters.down = false;
      await bus.projections.whenCaughtUp('totals');
      expect(model.totals.get('a')).toBe(12);
      const dead = await deadLetters.list();
      expect(dead.records.map((r) => r.reason)).toEqual(['projection-failed']);
      const status = await bus.projections.status();
      expect(status[0]?.partitions.every((p) => p.state === 'running')).toBe(true);
    });
  });
});
