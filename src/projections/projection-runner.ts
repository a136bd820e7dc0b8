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
import type { CheckpointStore } from '../log/checkpoint-store.js';
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
   * How often running projections look for checkpoints reset from outside (`harrier projections
   * rebuild`, another process), in ms; a projection whose committed checkpoints vanished is rebuilt
   * here too (its `reset()` is called and it replays from 0). 0 turns the check off.
   * @defaultValue 5000
   */
  readonly rebuildCheckIntervalMs?: number;
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
  readonly partitions: readonly PartitionStatus[];
}

interface Lane {
  readonly entry: HandlerEntry;
  readonly topic: string;
  readonly partition: number;
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
  #cancelRebuildCheck: (() => void) | undefined;
  #started = false;

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
    for (const entry of this.#entries()) await this.#startProjection(entry);
    this.#scheduleRebuildCheck();
  }

  /** Rebuilds, here, every projection whose committed checkpoints were removed from outside. */
  async checkExternalRebuilds(): Promise<string[]> {
    const rebuilt: string[] = [];
    for (const [name, lanes] of [...this.#lanes]) {
      if (this.#rebuilding.has(name)) continue;
      for (const lane of lanes) {
        if (lane.committed < 0) continue;
        if ((await this.#o.checkpoints.get(name, lane.topic, lane.partition)) !== undefined) continue;
        this.#logger.info('Projection checkpoints were reset from outside: rebuilding', { projection: name });
        await this.rebuild(name);
        rebuilt.push(name);
        break;
      }
    }
    return rebuilt;
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
    this.#cancelRebuildCheck?.();
    await Promise.all([...this.#lanes.keys()].map((name) => this.#stopProjection(name)));
  }

  /**
   * Empties a projection's read model (its `reset()` method, if it has one), removes its
   * checkpoints and replays it from offset 0.
   * @throws HarrierError `unknown-projection` naming the projections there are.
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
    await this.#stopProjection(name);
    await this.#o.checkpoints.reset(name);
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
    if (this.#started) await this.#startProjection(entry);
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
      result.push({ name: entry.name, partitions });
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

  async #startProjection(entry: HandlerEntry): Promise<void> {
    const lanes: Lane[] = [];
    for (const { topic, partition } of await this.#lanesOf(entry)) {
      const committed = (await this.#o.checkpoints.get(entry.name, topic, partition)) ?? -1;
      const lane: Lane = {
        entry,
        topic,
        partition,
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
      if (
        lane.committed >= 0 &&
        (await this.#o.checkpoints.get(lane.entry.name, lane.topic, lane.partition)) === undefined
      ) {
        // Reset from outside: leave it empty so the rebuild check sees it.
        return;
      }
      const target = lane.completed;
      lane.committed = await this.#o.checkpoints.commit(
        lane.entry.name,
        lane.topic,
        lane.partition,
        target,
        this.#clock.now(),
      );
      lane.sinceCommit = 0;
    } catch (error) {
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
    // Another handler's event type shares the topic: not for this projection.
    if (!entry.methods.has(record.type)) return 'done';
    const { outcome, facts } = await this.#attempts(
      entry,
      record.body,
      { messageId: record.id, type: record.type, endpoint: this.#o.endpoint, partitionKey: record.key },
      lane.abort.signal,
      { topic: lane.topic, partition: lane.partition, offset: record.offset },
      lane.breaker,
    );
    switch (outcome.kind) {
      // Only #attempts without a breaker ends in 'paused'; a lane has one.
      case 'abandoned':
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
