import { randomUUID } from 'node:crypto';
import { toErrorInfo, type AttemptRecord, type DeliveryFacts } from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { withDeadline } from '../clock/deadline.js';
import { sleep } from '../clock/sleep.js';
import { WakeList } from '../clock/wake-list.js';
import { buildDeadLetterRecord } from '../dead-letters/dead-letter-record.js';
import type { DeadLetterRecord, DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import type { ReplayRefusal } from '../dead-letters/replay-dead-letters.js';
import { CallSignal } from '../dispatch/call-signal.js';
import { HandlerPipeline } from '../dispatch/handler-pipeline.js';
import type { HandlerPipelineOptions } from '../dispatch/handler-pipeline-options.js';
import type { DeadLetterOutcome, PipelineOutcome } from '../dispatch/pipeline-outcome.js';
import { OutageBreaker, resolveOutageOptions } from '../dispatch/outage-breaker.js';
import { isTransientFailure } from '../dispatch/transient-failure.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { isRequestedRebuild, type CheckpointStore } from '../log/checkpoint-store.js';
import type { LogPosition } from '../dispatch/transactional-unit-of-work.js';
import type { EventLog, LogRecord } from '../log/event-log.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { lagBehind } from './projection-lag.js';

/**
 * What to do with an event a projection still cannot handle after its retries. Only message failures
 * reach it: an outage (the read model's database or the dead-letter store unreachable) pauses the
 * lane, which tries the same event again once the dependency answers.
 */
export type PoisonPolicy = 'skip' | 'halt';

/**
 * Options of {@link ProjectionRunner}: the handler pipeline's (middleware, hooks, verification,
 * retry policy, ...) and the lanes'. Projections never publish, so there is no publisher.
 */
export interface ProjectionRunnerOptions extends Omit<HandlerPipelineOptions, 'publisher' | 'encode'> {
  readonly log: EventLog;
  readonly checkpoints: CheckpointStore;
  readonly deadLetters: DeadLetterStore;
  /**
   * A poison event (still failing after its retries) is dead-lettered as `projection-failed` and
   * skipped (`skip`), or the partition stops there until `rebuild` or a restart (`halt`).
   * @defaultValue 'skip'
   */
  readonly onPoison?: PoisonPolicy;
  /**
   * Commit a checkpoint after this many completed events.
   * @defaultValue 100
   */
  readonly commitEvery?: number;
  /**
   * ...or this many ms after the first completed event not yet committed.
   * @defaultValue 1000
   */
  readonly commitIntervalMs?: number;
  /**
   * How often running projections look for a rebuild or reset from outside (`harrier projections
   * rebuild`, another process), in ms: a projection whose generation changed stops and restarts from
   * its new checkpoints, completing the rebuild first (its `reset()`) when its marker is still set.
   * A checkpoint commit notices it too. 0 turns the periodic check off.
   * @defaultValue 5000
   */
  readonly rebuildCheckIntervalMs?: number;
  /**
   * How long a runner waits for a rebuild another process is running (its marker set, and not
   * cleared meanwhile) before it takes the rebuild over, in ms: the other process may have died.
   * @defaultValue 30000
   */
  readonly rebuildTakeoverMs?: number;
}

/** Where one projection stands in one partition. */
export interface PartitionStatus {
  readonly topic: string;
  readonly partition: number;
  /** The committed checkpoint (-1: none). */
  readonly checkpoint: number;
  /** The last offset completed in this process (may be ahead of the committed checkpoint). */
  readonly completed: number;
  /** The next offset the log will write. */
  readonly endOffset: number;
  /** Events not yet completed: endOffset - 1 - completed. */
  readonly lag: number;
  readonly state: 'running' | 'halted' | 'stopped';
  /** Why the partition halted. */
  readonly haltedAt?: number;
}

/** Where one projection stands. */
export interface ProjectionStatus {
  readonly name: string;
  /** The generation its lanes run at (see {@link CheckpointStore.generation}); undefined when stopped. */
  readonly generation: number | undefined;
  readonly partitions: readonly PartitionStatus[];
}

interface Lane {
  readonly entry: HandlerEntry;
  readonly topic: string;
  readonly partition: number;
  /** The projection's generation the lane started at: its commits are conditional on it. */
  readonly generation: number;
  abort: AbortController;
  committed: number;
  completed: number;
  sinceCommit: number;
  cancelCommitTimer: (() => void) | undefined;
  state: 'running' | 'halted' | 'stopped';
  haltedAt: number | undefined;
  loop: Promise<void>;
  /** Woken whenever the lane completes an event or stops running. */
  readonly changes: WakeList;
  /** Pauses the lane while a dependency is unreachable: no event is skipped for an outage. */
  readonly breaker: OutageBreaker;
}

/** How handling one event through the pipeline ended, with the facts of its last attempt. */
interface Attempts {
  readonly outcome: PipelineOutcome;
  readonly facts: DeliveryFacts;
}

/** Dead-letter reasons that mean "not for this projection": the event is skipped, not dead. */
const NOT_FOR_THIS_PROJECTION = new Set(['unknown-type', 'no-handler']);

/** Makes a projection's read model empty again; `rebuild` calls it before replaying from offset 0. */
export interface ResettableProjection {
  reset(): void | Promise<void>;
}

/** Reads `signal.aborted` through a call: TypeScript keeps its narrowing across an await. */
function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}

/**
 * Feeds each `@Projection` from the event log, partition by partition in offset order, with
 * durable checkpoints.
 *
 * @remarks
 * Each (projection, topic, partition) is one lane handled one event at a time, so the completed
 * offsets are always contiguous and the checkpoint is simply the last one completed. Commits are
 * coalesced (every `commitEvery` events or `commitIntervalMs`), and the store never lowers one, so
 * a restart replays at most the uncommitted tail: projection handlers must be idempotent.
 */
export class ProjectionRunner {
  readonly #o: ProjectionRunnerOptions;
  readonly #pipeline: HandlerPipeline;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #lanes = new Map<string, Lane[]>();
  readonly #rebuilding = new Set<string>();
  /** Restarts of projections rebuilt elsewhere, under way (stop awaits them). */
  readonly #restarts = new Map<string, Promise<void>>();
  /** Projections stopped by a rebuild or restart that failed (its `reset()`, the store): the check starts them again. */
  readonly #pendingStarts = new Set<string>();
  #cancelRebuildCheck: (() => void) | undefined;
  #started = false;
  /** Ids of this runner's rebuilds whose `reset()` failed: their markers are taken over at once. */
  readonly #failedRebuilds = new Set<string>();
  /** Aborted by stop: ends a wait for another process's rebuild. */
  #life = new AbortController();

  readonly #outage: ReturnType<typeof resolveOutageOptions>;

  constructor(options: ProjectionRunnerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#pipeline = new HandlerPipeline(options);
    this.#logger = options.logger ?? consoleLogger;
    this.#outage = resolveOutageOptions(options.outage);
  }

  /** The projections this runner feeds. */
  projections(): string[] {
    return this.#entries().map((e) => e.name);
  }

  /** Starts every projection from its checkpoints. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#life = new AbortController();
    for (const entry of this.#entries()) await this.#startProjection(entry);
    this.#scheduleRebuildCheck();
  }

  /**
   * Restarts every running projection that was rebuilt or reset from outside since its lanes started
   * (its generation changed, or a rebuild marker is set), completing the rebuild here when its
   * marker is still set; resolves once they run again.
   * @returns the names of the projections restarted.
   */
  async checkExternalRebuilds(): Promise<string[]> {
    const restarted: string[] = [];
    for (const name of [...this.#pendingStarts]) {
      if (!this.#started || this.#rebuilding.has(name) || this.#restarts.has(name)) continue;
      this.#pendingStarts.delete(name);
      restarted.push(name);
      await this.#restartStopped(name);
    }
    for (const [name, lanes] of [...this.#lanes]) {
      if (this.#rebuilding.has(name) || this.#restarts.has(name)) continue;
      const running = lanes[0]?.generation;
      if (running === undefined) continue;
      const stored = await this.#o.checkpoints.generation(name);
      if (stored.generation === running && stored.rebuild === undefined) continue;
      restarted.push(name);
      await this.#rebuiltElsewhere(name, running, stored.generation);
    }
    return restarted;
  }

  /**
   * Stops a projection whose generation moved under its lanes (a rebuild or reset elsewhere) and
   * starts it again from the new checkpoints; the lanes' completed offsets of the old generation are
   * never committed. Called from a lane, it must not be awaited there (the stop awaits the lane).
   */
  #rebuiltElsewhere(name: string, running: number, stored?: number): Promise<void> {
    const under = this.#restarts.get(name);
    if (under !== undefined) return under;
    if (this.#rebuilding.has(name)) return Promise.resolve();
    this.#logger.warn(
      'Projection was rebuilt or reset elsewhere: its lanes stop without committing, and it restarts from its new checkpoints',
      {
        projection: name,
        generation: running,
        ...(stored !== undefined ? { storedGeneration: stored } : {}),
      },
    );
    if (!this.#started) return Promise.resolve();
    const restart = (async () => {
      try {
        await this.#stopProjection(name);
        await this.#restartStopped(name);
      } finally {
        this.#restarts.delete(name);
      }
    })();
    this.#restarts.set(name, restart);
    return restart;
  }

  /**
   * Starts a stopped projection again while the runner runs; never rejects: a failure (its
   * `reset()`, the store) is logged and the periodic check tries again.
   */
  async #restartStopped(name: string): Promise<void> {
    if (!this.#started) return;
    try {
      await this.#startProjection(this.#entry(name), undefined, true);
    } catch (error) {
      this.#pendingStarts.add(name);
      this.#logger.error('Starting a projection after a rebuild failed; the next rebuild check tries again', {
        projection: name,
        error: toErrorInfo(error),
      });
    }
  }

  #scheduleRebuildCheck(): void {
    const interval = this.#o.rebuildCheckIntervalMs ?? 5_000;
    if (interval <= 0 || !this.#started) return;
    this.#cancelRebuildCheck = this.#clock.setTimer(interval, () => {
      void this.checkExternalRebuilds()
        .catch((error: unknown) => {
          this.#logger.error('Checking for external rebuilds failed', { error: toErrorInfo(error) });
        })
        .finally(() => {
          this.#scheduleRebuildCheck();
        });
    });
  }

  /** Stops every lane and commits what was completed. */
  async stop(): Promise<void> {
    this.#started = false;
    this.#pendingStarts.clear();
    this.#life.abort();
    this.#cancelRebuildCheck?.();
    await Promise.all([...this.#restarts.values()]);
    await Promise.all([...this.#lanes.keys()].map((name) => this.#stopProjection(name)));
  }

  /**
   * Empties a projection's read model (its `reset()` method, if it has one), removes its
   * checkpoints and replays it from offset 0.
   *
   * @remarks
   * In this order: stop the lanes; set the rebuild marker, raise the generation and remove the
   * checkpoints (one step of the store); run `reset()`; clear the marker; start the lanes at the new
   * generation. A crash before the marker is cleared leaves it set, and the next start runs
   * `reset()` again before projecting, so the old read model is never replayed onto. See
   * docs/projections.md.
   * @throws HarrierError `unknown-projection` naming the projections there are; what `reset()` or
   *   the store threw (the marker then stays set).
   */
  async rebuild(name: string): Promise<void> {
    const entry = this.#entry(name);
    this.#rebuilding.add(name);
    try {
      await this.#rebuild(entry, name);
    } finally {
      this.#rebuilding.delete(name);
    }
  }

  async #rebuild(entry: HandlerEntry, name: string): Promise<void> {
    await this.#restarts.get(name);
    this.#pendingStarts.delete(name);
    await this.#stopProjection(name);
    let generation: number;
    try {
      generation = await this.#completeRebuild(entry, 'begin');
    } catch (error) {
      // The marker stays set: the periodic check (or the next start) completes the rebuild.
      if (this.#started) this.#pendingStarts.add(name);
      throw error;
    }
    if (this.#started) await this.#startProjection(entry, generation);
  }

  /**
   * Runs a rebuild to its end and returns the generation to project at.
   *
   * @remarks
   * `how` says what to do first: `'begin'` a rebuild of our own (whatever is under way); take over
   * the rebuild whose marker has the given id (a start finding a rebuild cut short); or `'wait'` for
   * the one under way. A marker asked for from outside ({@link isRequestedRebuild}) is taken over at
   * once; one of another runner is waited for (checked every 200 ms) and taken over only after
   * `rebuildTakeoverMs`, since its process may still be in its `reset()`. When our own rebuild was
   * taken over during our `reset()` and has ended since, our `reset()` may have emptied what that
   * rebuild projected: we begin another one (its generation makes those lanes restart).
   */
  async #completeRebuild(
    entry: HandlerEntry,
    how: 'begin' | 'wait' | { readonly takeOver: string },
  ): Promise<number> {
    const { name } = entry;
    const store = this.#o.checkpoints;
    let next: 'begin' | 'wait' | { readonly takeOver: string } = how;
    let waiting: { readonly id: string; readonly since: number } | undefined;
    for (;;) {
      if (next !== 'wait') {
        const id = randomUUID();
        const replacing = next === 'begin' ? undefined : next.takeOver;
        const begun = await store.beginRebuild(name, id, this.#clock.now(), replacing);
        if (begun !== undefined) {
          try {
            await this.#resetReadModel(entry);
          } catch (error) {
            this.#failedRebuilds.add(id);
            throw error;
          }
          if (await store.endRebuild(name, id)) {
            this.#logger.info('Projection rebuilt: it replays from offset 0', {
              projection: name,
              generation: begun.generation,
            });
            if (replacing !== undefined) this.#failedRebuilds.delete(replacing);
            return begun.generation;
          }
          if ((await store.generation(name)).rebuild === undefined) {
            this.#logger.warn(
              'A rebuild of the projection elsewhere took ours over and ended while our reset() ran: rebuilding again',
              { projection: name },
            );
            next = 'begin';
            continue;
          }
        }
      }
      const stored = await store.generation(name);
      if (stored.rebuild === undefined) return stored.generation;
      if (isRequestedRebuild(stored.rebuild) || this.#failedRebuilds.has(stored.rebuild.id)) {
        next = { takeOver: stored.rebuild.id };
        continue;
      }
      // Another runner is rebuilding it: wait for it, and take it over only when it seems to have died.
      if (waiting?.id !== stored.rebuild.id) waiting = { id: stored.rebuild.id, since: this.#clock.now() };
      if (this.#clock.now() - waiting.since >= (this.#o.rebuildTakeoverMs ?? 30_000)) {
        this.#logger.warn('A rebuild of the projection elsewhere did not end in time: taking it over', {
          projection: name,
          rebuildId: stored.rebuild.id,
        });
        next = { takeOver: stored.rebuild.id };
        continue;
      }
      next = 'wait';
      if (this.#life.signal.aborted) {
        throw new HarrierError(
          'stopping',
          `Projection "${name}" was stopping while another process rebuilt it: start it again once that rebuild ends`,
        );
      }
      await sleep(this.#clock, 200, this.#life.signal);
    }
  }

  /** Runs the projection's `reset()`, when it has one. */
  async #resetReadModel(entry: HandlerEntry): Promise<void> {
    const context = this.#pipeline.context(
      {
        v: 1,
        id: '00000000-0000-7000-8000-000000000000',
        kind: 'event',
        type: 'harrier.Rebuild',
        payload: {},
        meta: {
          correlationId: '00000000-0000-7000-8000-000000000000',
          occurredAt: new Date(this.#clock.now()).toISOString(),
          headers: {},
        },
      },
      1,
      entry,
      new AbortController().signal,
    );
    const prototype = entry.target.prototype as Partial<ResettableProjection>;
    if (typeof prototype.reset === 'function') await this.#o.invoke(entry, 'reset', undefined, context);
  }

  /**
   * Resolves once every lane of a projection (or of all) has completed everything the log holds now.
   *
   * @remarks
   * `timeoutMs` is wall time even under a test clock: it bounds how long the caller waits.
   * @throws HarrierError `not-caught-up` naming the lane still behind after `timeoutMs`.
   */
  async whenCaughtUp(name?: string, timeoutMs = 30_000): Promise<void> {
    const lanes = name === undefined ? [...this.#lanes.values()].flat() : (this.#lanes.get(name) ?? []);
    const gaveUp = new AbortController();
    let behind: { readonly lane: Lane; readonly end: number } | undefined;
    const catchUp = async (): Promise<void> => {
      for (const lane of lanes) {
        const end = await this.#o.log.endOffset(lane.topic, lane.partition);
        behind = { lane, end };
        while (lane.completed < end - 1 && lane.state === 'running' && !gaveUp.signal.aborted) {
          await lane.changes.wait(gaveUp.signal);
        }
      }
    };
    try {
      await withDeadline(catchUp(), timeoutMs, () => {
        const where =
          behind === undefined
            ? 'reading the log end offsets'
            : `at ${behind.lane.completed} of ${behind.end - 1} in ${behind.lane.topic}/${behind.lane.partition}`;
        return new HarrierError(
          'not-caught-up',
          `Projection ${behind?.lane.entry.name ?? name ?? '(all)'} is ${where} after ${timeoutMs} ms`,
        );
      });
    } finally {
      gaveUp.abort();
    }
  }

  /**
   * Runs the log's retention, keeping every record a projection of this runner has not passed yet:
   * in a partition some projection reads, nothing at or above the lowest of their checkpoints + 1
   * (0 when one of them has no checkpoint there) is removed.
   * @returns how many records the log removed.
   */
  async maintain(nowMs: number = this.#clock.now()): Promise<number> {
    const readers = new Map<string, string[]>();
    for (const entry of this.#entries()) {
      for (const { topic } of await this.#lanesOf(entry)) {
        const names = readers.get(topic) ?? [];
        if (!names.includes(entry.name)) names.push(entry.name);
        readers.set(topic, names);
      }
    }
    return this.#o.log.maintenance(nowMs, {
      keepFrom: async (topic, partition) => {
        const names = readers.get(topic);
        if (names === undefined) return undefined;
        let lowest = Number.POSITIVE_INFINITY;
        for (const name of names) {
          lowest = Math.min(lowest, (await this.#o.checkpoints.get(name, topic, partition)) ?? -1);
        }
        return lowest + 1;
      },
    });
  }

  /** Per-partition checkpoint, progress and lag of each projection. */
  async status(): Promise<ProjectionStatus[]> {
    const result: ProjectionStatus[] = [];
    for (const entry of this.#entries()) {
      const lanes = this.#lanes.get(entry.name);
      const partitions: PartitionStatus[] = [];
      for (const { topic, partition } of await this.#lanesOf(entry)) {
        const lane = lanes?.find((l) => l.topic === topic && l.partition === partition);
        const checkpoint = (await this.#o.checkpoints.get(entry.name, topic, partition)) ?? -1;
        const endOffset = await this.#o.log.endOffset(topic, partition);
        const completed = Math.max(checkpoint, lane?.completed ?? -1);
        partitions.push({
          topic,
          partition,
          checkpoint,
          completed,
          endOffset,
          lag: lagBehind(endOffset, completed),
          state: lane?.state ?? 'stopped',
          ...(lane?.haltedAt !== undefined ? { haltedAt: lane.haltedAt } : {}),
        });
      }
      result.push({ name: entry.name, generation: lanes?.[0]?.generation, partitions });
    }
    return result;
  }

  #entries(): HandlerEntry[] {
    return this.#o.registry.entries().filter((e) => e.kind === 'projection');
  }

  #entry(name: string): HandlerEntry {
    const entry = this.#entries().find((e) => e.name === name);
    if (entry === undefined) {
      throw new HarrierError(
        'unknown-projection',
        `No projection named "${name}": the projections are ${this.projections().join(', ') || '(none)'}`,
      );
    }
    return entry;
  }

  async #lanesOf(entry: HandlerEntry): Promise<{ topic: string; partition: number }[]> {
    const topics = [
      ...new Set(entry.definitions.map((d) => d.topic).filter((t): t is string => t !== undefined)),
    ];
    const lanes: { topic: string; partition: number }[] = [];
    for (const topic of topics) {
      const count = await this.#o.log.partitions(topic);
      for (let partition = 0; partition < count; partition++) lanes.push({ topic, partition });
    }
    return lanes;
  }

  /**
   * Starts a projection's lanes from its checkpoints at its stored generation (or at `generation`,
   * the one a rebuild here just ended at). A projection whose rebuild marker is set (a rebuild was
   * cut short, or is asked for by `harrier projections rebuild`) has the rebuild completed first:
   * taken over at once on a start of the runner (`restart` false: a marker left by a crash), waited
   * for when restarting after a rebuild elsewhere (see {@link ProjectionRunner.#completeRebuild}).
   */
  async #startProjection(entry: HandlerEntry, generation?: number, restart = false): Promise<void> {
    let at = generation;
    if (at === undefined) {
      const stored = await this.#o.checkpoints.generation(entry.name);
      at = stored.generation;
      if (stored.rebuild !== undefined) {
        this.#logger.warn(
          'Projection has a rebuild marker set (a rebuild was cut short or asked for): completing the rebuild before projecting',
          { projection: entry.name, rebuildId: stored.rebuild.id, generation: stored.generation },
        );
        at = await this.#completeRebuild(entry, restart ? 'wait' : { takeOver: stored.rebuild.id });
      }
    }
    const lanes: Lane[] = [];
    for (const { topic, partition } of await this.#lanesOf(entry)) {
      const committed = (await this.#o.checkpoints.get(entry.name, topic, partition)) ?? -1;
      const lane: Lane = {
        entry,
        topic,
        partition,
        generation: at,
        abort: new AbortController(),
        committed,
        completed: committed,
        sinceCommit: 0,
        cancelCommitTimer: undefined,
        state: 'running',
        haltedAt: undefined,
        loop: Promise.resolve(),
        changes: new WakeList(),
        breaker: new OutageBreaker(
          this.#clock,
          this.#logger,
          { endpoint: this.#o.endpoint, projection: { name: entry.name, topic, partition } },
          this.#outage,
          this.#pipeline.outageListener,
        ),
      };
      lane.loop = this.#run(lane);
      lanes.push(lane);
    }
    this.#lanes.set(entry.name, lanes);
  }

  async #stopProjection(name: string): Promise<void> {
    const lanes = this.#lanes.get(name) ?? [];
    for (const lane of lanes) {
      lane.abort.abort();
      lane.breaker.close();
    }
    await Promise.all(lanes.map((lane) => lane.loop));
    for (const lane of lanes) {
      lane.cancelCommitTimer?.();
      if (lane.state === 'running') lane.state = 'stopped';
      lane.changes.wakeAll();
      await this.#commit(lane);
    }
    this.#lanes.delete(name);
  }

  async #run(lane: Lane): Promise<void> {
    const { signal } = lane.abort;
    // Each round reads the log from the last completed offset; an outage of the log ends a round and,
    // once a probe gets through, the next one picks up where it stopped.
    while (!signal.aborted && (await this.#read(lane))) {
      if ((await lane.breaker.admit(signal)) === 'stopped') break;
    }
    lane.changes.wakeAll();
  }

  /**
   * Reads and handles the lane's events until it stops, halts or the log fails.
   * @returns true when the log became unreachable (the caller waits for a probe and reads again).
   */
  async #read(lane: Lane): Promise<boolean> {
    const { signal } = lane.abort;
    try {
      for await (const record of this.#o.log.subscribe(lane.topic, {
        partition: lane.partition,
        afterOffset: lane.completed,
        signal,
      })) {
        if (signal.aborted) break;
        const outcome = await this.#handle(lane, record);
        // Stopped mid-record: it is not done, so it is neither completed nor committed.
        if (outcome === 'aborted') break;
        if (outcome === 'halt') {
          lane.state = 'halted';
          lane.haltedAt = record.offset;
          break;
        }
        // A record read after an outage of the log: it answers again.
        if (lane.breaker.isPaused()) lane.breaker.succeeded();
        lane.completed = record.offset;
        lane.sinceCommit++;
        lane.changes.wakeAll();
        if (lane.sinceCommit >= (this.#o.commitEvery ?? 100)) await this.#commit(lane);
        else
          lane.cancelCommitTimer ??= this.#clock.setTimer(
            this.#o.commitIntervalMs ?? 1_000,
            () => void this.#commit(lane),
          );
      }
    } catch (error) {
      if (signal.aborted) return false;
      if (isTransientFailure(error, this.#o.isTransient)) {
        lane.breaker.tripped(error);
        return true;
      }
      this.#logger.error('Projection lane failed; it stops until restart or rebuild', {
        projection: lane.entry.name,
        topic: lane.topic,
        partition: lane.partition,
        error: toErrorInfo(error),
      });
      lane.state = 'halted';
    }
    return false;
  }

  /**
   * Commits the lane's completed offset; never rejects, since timers call it. A failed commit (the
   * store unreachable) is logged and tried again `commitIntervalMs` later while the lane runs.
   */
  async #commit(lane: Lane): Promise<void> {
    lane.cancelCommitTimer?.();
    lane.cancelCommitTimer = undefined;
    if (lane.completed <= lane.committed) return;
    try {
      const target = lane.completed;
      lane.committed = await this.#o.checkpoints.commit(
        lane.entry.name,
        lane.topic,
        lane.partition,
        target,
        this.#clock.now(),
        { generation: lane.generation },
      );
      lane.sinceCommit = 0;
    } catch (error) {
      if (HarrierError.is(error, 'projection-rebuilt')) {
        // Nothing of the old generation is ever committed: the lane stops and the projection restarts.
        lane.completed = lane.committed;
        void this.#rebuiltElsewhere(lane.entry.name, lane.generation);
        return;
      }
      this.#logger.error('Checkpoint commit failed; will commit again later', {
        projection: lane.entry.name,
        error: toErrorInfo(error),
      });
      // Without this, a lane that receives nothing more would leave its checkpoint behind until the stop.
      if (lane.state === 'running' && !lane.abort.signal.aborted) {
        lane.cancelCommitTimer ??= this.#clock.setTimer(
          this.#o.commitIntervalMs ?? 1_000,
          () => void this.#commit(lane),
        );
      }
    }
  }

  /**
   * Handles one record with retries: `done` (handled, skipped or dead-lettered), `halt` (the lane must
   * stop there) or `aborted` (the lane is stopping and the record is not done).
   */
  async #handle(lane: Lane, record: LogRecord): Promise<'done' | 'halt' | 'aborted'> {
    const { entry } = lane;
    // Another handler's event type shares the topic: not for this projection. An older name of an
    // event (a definition's alias) is its event too.
    if (
      !entry.methods.has(record.type) &&
      !entry.methods.has(this.#o.registry.definition(record.type)?.type ?? '')
    )
      return 'done';
    const { outcome, facts } = await this.#attempts(
      entry,
      record.body,
      { messageId: record.id, type: record.type, endpoint: this.#o.endpoint, partitionKey: record.key },
      lane.abort.signal,
      { topic: lane.topic, partition: lane.partition, offset: record.offset, generation: lane.generation },
      lane.breaker,
    );
    switch (outcome.kind) {
      case 'abandoned':
        // Not stopping: the unit of work refused the call, since the projection was rebuilt elsewhere.
        if (!lane.abort.signal.aborted) void this.#rebuiltElsewhere(entry.name, lane.generation);
        return 'aborted';
      // Only #attempts without a breaker ends in 'paused'; a lane has one.
      case 'paused':
        return 'aborted';
      case 'handled':
        this.#pipeline.handled(outcome);
        return 'done';
      case 'retry':
        // #attempts only returns final outcomes.
        throw new HarrierError('internal', 'A projection attempt ended in a retry outcome');
      case 'dead-letter':
        if (NOT_FOR_THIS_PROJECTION.has(outcome.reason)) return 'done';
        return this.#poison(lane, record, outcome, facts);
    }
  }

  /**
   * Runs a projection handler on one event through the pipeline, retrying in place with its retry
   * policy (the backoff on the clock) until it is handled, dead for good, or `signal` aborts. With a
   * `breaker`, an outage pauses and tries the same attempt again once a probe is due; without one (a
   * replay) it ends the attempts with the `paused` outcome.
   */
  async #attempts(
    entry: HandlerEntry,
    body: string,
    about: Pick<DeliveryFacts, 'messageId' | 'type' | 'endpoint' | 'partitionKey'>,
    signal: AbortSignal,
    position?: LogPosition,
    breaker?: OutageBreaker,
  ): Promise<Attempts> {
    const history: AttemptRecord[] = [];
    for (let attempt = 1; ; attempt++) {
      const facts: DeliveryFacts = {
        ...about,
        kind: 'event',
        handler: entry.name,
        attempt,
        history: [...history],
      };
      // A stop during the backoff ends the retries: the record is left for the next start.
      if (signal.aborted) return { outcome: { kind: 'abandoned' }, facts };
      // The lane's signal is shared by its events: a time-out aborts a signal of this attempt's own.
      const call = new CallSignal(signal);
      let outcome: PipelineOutcome;
      try {
        outcome = await this.#pipeline.run({
          body,
          facts,
          handler: entry,
          signal: call.read,
          timedOut: (reason) => {
            call.timedOut(reason);
          },
          // Events of other types are skipped, not dead-lettered: #poison reports what it stores.
          reportRefusal: false,
          ...(position !== undefined ? { position } : {}),
        });
      } finally {
        call.endCall();
      }
      // A handler that returned has applied its event, stop or not: it counts, and its checkpoint
      // moves. A stop only cancels what failed (the record is left for the next start).
      if (outcome.kind !== 'handled' && isAborted(signal)) return { outcome: { kind: 'abandoned' }, facts };
      if (outcome.kind === 'paused') {
        if (breaker === undefined) return { outcome, facts };
        breaker.tripped(outcome.error);
        if ((await breaker.admit(signal)) === 'stopped') return { outcome: { kind: 'abandoned' }, facts };
        // The outage spent no attempt: the same one again.
        attempt--;
        continue;
      }
      breaker?.succeeded();
      if (outcome.kind !== 'retry') return { outcome, facts };
      this.#pipeline.retrying(outcome);
      history.push({ attempt, at: this.#clock.now(), error: outcome.errorInfo });
      await sleep(this.#clock, outcome.retryAt - this.#clock.now(), signal);
    }
  }

  /** Whether `record` died in one of this runner's projections (a replay must run it here). */
  handlesDeadLetter(record: DeadLetterRecord): boolean {
    return (
      (record.reason === 'projection-failed' || record.logPosition !== undefined) &&
      record.handler !== undefined &&
      this.#entries().some((e) => e.name === record.handler)
    );
  }

  /**
   * Runs a dead-lettered event through its projection again, with fresh attempts (a replay).
   *
   * @remarks
   * The event is applied now, after the events the projection handled since it died: out of log
   * order. A projection whose read model depends on that order should be rebuilt instead. The
   * checkpoints do not move. On failure the dead letter is stored again (same id, replay history kept).
   * @returns undefined when the projection handled the event, else why it did not.
   */
  async replayDeadLetter(record: DeadLetterRecord): Promise<ReplayRefusal | undefined> {
    if ((this.#o.onPoison ?? 'skip') === 'halt') {
      // The partition halted at this event and handles it again on restart: running it here too
      // would apply it twice.
      return {
        code: 'projection-halted',
        message: `projections run with onPoison 'halt': the partition stopped at this event (offset ${record.logPosition?.offset ?? '?'}) and handles it again once the endpoint restarts; fix the handler and restart, or rebuild the projection`,
      };
    }
    const entry = this.#entries().find((e) => e.name === record.handler);
    if (entry === undefined) {
      return {
        code: 'not-replayable',
        message: `no projection named "${record.handler ?? ''}" runs here: the projections are ${this.projections().join(', ') || '(none)'}`,
      };
    }
    const { outcome, facts } = await this.#attempts(
      entry,
      record.envelope,
      {
        messageId: record.messageId,
        type: record.type,
        endpoint: record.endpoint,
        partitionKey: record.partitionKey,
      },
      new AbortController().signal,
    );
    switch (outcome.kind) {
      case 'handled':
        this.#pipeline.handled(outcome);
        return undefined;
      case 'abandoned':
      case 'retry':
        return { code: 'projection-failed', message: 'the replay was stopped' };
      case 'paused':
        return {
          code: 'transient',
          message: `a dependency of projection "${entry.name}" is unreachable (${outcome.errorInfo.message}); replay again once it answers`,
        };
      case 'dead-letter':
        break;
    }
    if (outcome.reason === 'no-handler') {
      return {
        code: 'not-replayable',
        message: `projection "${entry.name}" has no @On(${outcome.envelope?.type ?? record.type ?? '?'}) method any more`,
      };
    }
    if (outcome.reason !== 'projection-failed')
      return { code: outcome.reason, message: outcome.error.message };
    const dead = buildDeadLetterRecord({
      body: record.envelope,
      facts,
      handler: entry.name,
      reason: outcome.reason,
      error: outcome.error,
      ordered: false,
      now: this.#clock.now(),
      logPosition: record.logPosition,
    });
    await this.#o.deadLetters.add(dead);
    this.#pipeline.deadLettered(dead, outcome.thrown);
    return { code: 'projection-failed', message: `${outcome.error.name}: ${outcome.error.message}` };
  }

  async #poison(
    lane: Lane,
    record: LogRecord,
    outcome: DeadLetterOutcome,
    facts: DeliveryFacts,
  ): Promise<'done' | 'halt' | 'aborted'> {
    const dead = buildDeadLetterRecord({
      body: record.body,
      facts,
      handler: lane.entry.name,
      reason: outcome.reason,
      error: outcome.error,
      ordered: false,
      now: this.#clock.now(),
      logPosition: { topic: lane.topic, partition: lane.partition, offset: record.offset },
    });
    // The event is passed only once its dead letter is stored: an unreachable store pauses the lane
    // (an outage) and the store is tried again when a probe is due.
    for (;;) {
      try {
        await this.#o.deadLetters.add(dead);
        lane.breaker.succeeded();
        break;
      } catch (storeError) {
        if (!isTransientFailure(storeError, this.#o.isTransient)) {
          this.#logger.error('Could not store the dead letter of a projection event; halting the partition', {
            projection: lane.entry.name,
            offset: record.offset,
            error: toErrorInfo(storeError),
          });
          return 'halt';
        }
        this.#logger.error('Could not store the dead letter of a projection event; the lane pauses', {
          projection: lane.entry.name,
          offset: record.offset,
          error: toErrorInfo(storeError),
        });
        lane.breaker.tripped(storeError);
        if ((await lane.breaker.admit(lane.abort.signal)) === 'stopped') return 'aborted';
      }
    }
    // A handler failure was told to telemetry with its call; a refusal only now that it is stored.
    if (outcome.reason !== 'projection-failed') this.#pipeline.reportRefused(outcome, facts.attempt);
    this.#logger.warn('Projection event dead-lettered', {
      projection: lane.entry.name,
      topic: lane.topic,
      partition: lane.partition,
      offset: record.offset,
      reason: outcome.reason,
    });
    this.#pipeline.deadLettered(dead, outcome.thrown);
    return (this.#o.onPoison ?? 'skip') === 'skip' ? 'done' : 'halt';
  }
}
