/**
 * The ProjectionRunner's coalesced checkpoint commit while its checkpoint store is unreachable: a
 * commit fired by a timer must neither reject unheard (which ends a Node process) nor be forgotten.
 */
import 'reflect-metadata';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  HarrierError,
  On,
  Projection,
  createBus,
  defineEvent,
  silentLogger,
  type MessageBus,
} from '../../../src/index.js';
import { ManualClock } from '../../../src/clock/manual-clock.js';
import {
  InMemoryCheckpointStore,
  InMemoryEventLog,
  type Checkpoint,
  type CheckpointStore,
  type CommitOptions,
  type ProjectionGeneration,
} from '../../../src/log/index.js';
import { waitFor } from '../../helpers/local-redis.js';

const Counted = defineEvent('commit.Counted', {
  schema: z.object({ n: z.number() }),
  partitionKey: 'n',
  topic: 'counts',
});

@Projection('counter')
class Counter {
  @On(Counted)
  onCounted(): void {}
}

/** A checkpoint store in memory that can be made unreachable, as a database in an outage. */
class FlakyCheckpointStore implements CheckpointStore {
  readonly #inner = new InMemoryCheckpointStore();
  down = false;
  failures = 0;

  #check(): void {
    if (!this.down) return;
    this.failures++;
    throw new HarrierError('postgres-unavailable', 'Could not reach the checkpoint store (test outage)');
  }

  async get(projection: string, topic: string, partition: number): Promise<number | undefined> {
    this.#check();
    return this.#inner.get(projection, topic, partition);
  }
  async commit(
    projection: string,
    topic: string,
    partition: number,
    offset: number,
    nowMs: number,
    options?: CommitOptions,
  ) {
    this.#check();
    return this.#inner.commit(projection, topic, partition, offset, nowMs, options);
  }
  list(projection?: string): Promise<Checkpoint[]> {
    return this.#inner.list(projection);
  }
  reset(projection: string): Promise<void> {
    return this.#inner.reset(projection);
  }
  lowest(topic: string, partition: number): Promise<number | undefined> {
    return this.#inner.lowest(topic, partition);
  }
  generation(projection: string): Promise<ProjectionGeneration> {
    return this.#inner.generation(projection);
  }
  generations(): Promise<ProjectionGeneration[]> {
    return this.#inner.generations();
  }
  beginRebuild(projection: string, id: string, nowMs: number, replacing?: string) {
    return this.#inner.beginRebuild(projection, id, nowMs, replacing);
  }
  endRebuild(projection: string, id: string): Promise<boolean> {
    return this.#inner.endRebuild(projection, id);
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
}

const unhandled: unknown[] = [];
const record = (reason: unknown): void => {
  unhandled.push(reason);
};
const buses: MessageBus[] = [];

beforeEach(() => {
  unhandled.length = 0;
  process.on('unhandledRejection', record);
});

afterEach(async () => {
  process.off('unhandledRejection', record);
  await Promise.all(buses.splice(0).map((bus) => bus.stop()));
});

describe('ProjectionRunner', () => {
  describe('commit (every commitIntervalMs)', () => {
    describe('when the checkpoint store is unreachable as the timer fires', () => {
      it('rejects nothing unheard, and commits once the store is back without a new event', async () => {
        const clock = new ManualClock();
        const store = new FlakyCheckpointStore();
        const errors: string[] = [];
        const bus = createBus({
          endpoint: 'reports',
          clock,
          handlers: [Counter],
          definitions: [Counted],
          eventLog: new InMemoryEventLog({ topics: [{ name: 'counts', partitions: 1 }] }),
          checkpoints: store,
          logger: { ...silentLogger, error: (message) => void errors.push(message) },
          projections: { commitEvery: 100, commitIntervalMs: 1_000 },
        });
        buses.push(bus);
        await bus.start();
        await bus.publish(Counted, { n: 1 });
        await bus.projections.whenCaughtUp();
        clock.advance(1_000);
        await waitFor('the first commit', async () => (await store.get('counter', 'counts', 0)) === 0, {
          timeoutMs: 5_000,
        });

        store.down = true;
        await bus.publish(Counted, { n: 2 });
        await bus.projections.whenCaughtUp();
        // The commit reads the stored checkpoint first (a reset from outside): that read fails.
        clock.advance(1_000);
        await waitFor('the failed commit to be reported', () => errors.length > 0, { timeoutMs: 5_000 });
        expect(errors).toEqual(['Checkpoint commit failed; will commit again later']);

        store.down = false;
        clock.advance(1_000);
        await waitFor(
          'the commit to be tried again',
          async () => {
            return (await store.get('counter', 'counts', 0)) === 1;
          },
          { timeoutMs: 5_000 },
        );
        // A rejection is reported on the turn after it happens: give it that turn.
        await new Promise((resolve) => setImmediate(resolve));
        expect(unhandled).toEqual([]);
        expect(store.failures).toBe(1);
      });
    });
  });
});
