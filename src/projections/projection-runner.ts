import {
  toErrorInfo,
  type AttemptRecord,
  type DeliveryFacts,
  type ErrorInfo,
} from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { sleep } from '../clock/sleep.js';
import { buildDeadLetterRecord } from '../dead-letters/dead-letter-record.js';
import type { DeadLetterRecord, DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import type { ReplayRefusal } from '../dead-letters/replay-dead-letters.js';
import type { HandlerInvoker } from '../dispatch/dispatcher.js';
import { HandlerContext, type HandlerContextEnv } from '../dispatch/handler-context.js';
import { backoffDelay, isPermanent, resolveRetryPolicy } from '../dispatch/retry-policy.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry, HandlerRegistry } from '../handlers/handler-registry.js';
import type { CheckpointStore } from '../log/checkpoint-store.js';
import type { EventLog, LogRecord } from '../log/event-log.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { decodeEnvelope, encodeEnvelope } from '../messages/codec.js';
import type { MessageDefinition, RetryOptions } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';

/** What to do with an event a projection still cannot handle after its retries. */
export type PoisonPolicy = 'skip' | 'halt';

/** Options of {@link ProjectionRunner}. */
export interface ProjectionRunnerOptions {
  readonly log: EventLog;
  readonly checkpoints: CheckpointStore;
  readonly registry: HandlerRegistry;
  readonly invoke: HandlerInvoker;
  readonly deadLetters: DeadLetterStore;
  /** The endpoint named in dead letters. */
  readonly endpoint: string;
  /**
   * Retry policy of projection handlers unless the projection sets one.
   * @defaultValue 5 attempts, backoff 200 ms base, 60 s cap, 0.2 jitter
   */
  readonly retry?: RetryOptions;
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
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /** @defaultValue warnings and errors as JSON lines on stderr */
  readonly logger?: Logger;
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
  listeners: Set<() => void>;
}

/** Makes a projection's read model empty again; `rebuild` calls it before replaying from offset 0. */
export interface ResettableProjection {
  reset(): void | Promise<void>;
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
  readonly #clock: Clock;
  /** What every projection handler's context needs: the same for every event. */
  readonly #contextEnv: HandlerContextEnv;
  readonly #logger: Logger;
  readonly #lanes = new Map<string, Lane[]>();
  readonly #rebuilding = new Set<string>();
  #cancelRebuildCheck: (() => void) | undefined;
  #started = false;

  constructor(options: ProjectionRunnerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#contextEnv = {
      now: () => this.#clock.now(),
      maxBytes: Number.MAX_SAFE_INTEGER,
      encode: encodeEnvelope,
    };
    this.#logger = options.logger ?? consoleLogger;
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
    const context = new HandlerContext(
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
      this.#o.endpoint,
      name,
      new AbortController().signal,
      this.#contextEnv,
    );
    const prototype = entry.target.prototype as Partial<ResettableProjection>;
    if (typeof prototype.reset === 'function') await this.#o.invoke(entry, 'reset', undefined, context);
    if (this.#started) await this.#startProjection(entry);
  }

  /** Resolves once every lane of a projection (or of all) has completed everything the log holds now. */
  async whenCaughtUp(name?: string, timeoutMs = 30_000): Promise<void> {
    const lanes = name === undefined ? [...this.#lanes.values()].flat() : (this.#lanes.get(name) ?? []);
    const deadline = Date.now() + timeoutMs;
    for (const lane of lanes) {
      const end = await this.#o.log.endOffset(lane.topic, lane.partition);
      while (lane.completed < end - 1 && lane.state === 'running') {
        if (Date.now() > deadline) {
          throw new HarrierError(
            'not-caught-up',
            `Projection ${lane.entry.name} is at ${lane.completed} of ${end - 1} in ${lane.topic}/${lane.partition} after ${timeoutMs} ms`,
          );
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, 50);
          lane.listeners.add(done);
          function done(): void {
            clearTimeout(timer);
            lane.listeners.delete(done);
            resolve();
          }
        });
      }
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
          lag: Math.max(0, endOffset - 1 - completed),
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
        listeners: new Set(),
      };
      lane.loop = this.#run(lane);
      lanes.push(lane);
    }
    this.#lanes.set(entry.name, lanes);
  }

  async #stopProjection(name: string): Promise<void> {
    const lanes = this.#lanes.get(name) ?? [];
    for (const lane of lanes) lane.abort.abort();
    await Promise.all(lanes.map((lane) => lane.loop));
    for (const lane of lanes) {
      lane.cancelCommitTimer?.();
      if (lane.state === 'running') lane.state = 'stopped';
      await this.#commit(lane);
    }
    this.#lanes.delete(name);
  }

  async #run(lane: Lane): Promise<void> {
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
        lane.completed = record.offset;
        lane.sinceCommit++;
        for (const listener of [...lane.listeners]) listener();
        if (lane.sinceCommit >= (this.#o.commitEvery ?? 100)) await this.#commit(lane);
        else
          lane.cancelCommitTimer ??= this.#clock.setTimer(
            this.#o.commitIntervalMs ?? 1_000,
            () => void this.#commit(lane),
          );
      }
    } catch (error) {
      if (!signal.aborted) {
        this.#logger.error('Projection lane failed; it stops until restart or rebuild', {
          projection: lane.entry.name,
          topic: lane.topic,
          partition: lane.partition,
          error: toErrorInfo(error),
        });
        lane.state = 'halted';
      }
    }
    for (const listener of [...lane.listeners]) listener();
  }

  async #commit(lane: Lane): Promise<void> {
    lane.cancelCommitTimer?.();
    lane.cancelCommitTimer = undefined;
    if (lane.completed <= lane.committed) return;
    if (
      lane.committed >= 0 &&
      (await this.#o.checkpoints.get(lane.entry.name, lane.topic, lane.partition)) === undefined
    ) {
      // Reset from outside: leave it empty so the rebuild check sees it.
      return;
    }
    const target = lane.completed;
    try {
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
    }
  }

  /**
   * Handles one record with retries: `done` (handled, skipped or dead-lettered), `halt` (the lane must
   * stop there) or `aborted` (the lane is stopping and the record is not done).
   */
  async #handle(lane: Lane, record: LogRecord): Promise<'done' | 'halt' | 'aborted'> {
    const { entry } = lane;
    const decoded = decodeEnvelope(record.body, (type) => this.#o.registry.definition(type));
    if (!decoded.ok) {
      // Another endpoint's event type shares the topic: not for this projection.
      if (decoded.reason === 'unknown-type') return 'done';
      return this.#poison(
        lane,
        record,
        decoded.reason,
        { name: 'MessageDecodeError', message: decoded.message, code: decoded.reason },
        1,
        [],
      );
    }
    const method = entry.methods.get(decoded.envelope.type);
    if (method === undefined) return 'done';
    const outcome = await this.#attempts(entry, method, decoded, lane.abort.signal);
    if (outcome.ok) return 'done';
    if (outcome.aborted) return 'aborted';
    return this.#poison(lane, record, 'projection-failed', outcome.error, outcome.attempt, outcome.history);
  }

  /**
   * Calls a projection handler for one event with its retry policy: ok, failed for good (with the
   * last error and the earlier attempts), or aborted by `signal` before it succeeded.
   */
  async #attempts(
    entry: HandlerEntry,
    method: string,
    decoded: { readonly envelope: Envelope; readonly definition: MessageDefinition },
    signal: AbortSignal,
  ): Promise<
    | { readonly ok: true }
    | { readonly ok: false; readonly aborted: true }
    | {
        readonly ok: false;
        readonly aborted: false;
        readonly error: ErrorInfo;
        readonly attempt: number;
        readonly history: AttemptRecord[];
      }
  > {
    const policy = resolveRetryPolicy(entry.options.retry, decoded.definition.retry, this.#o.retry);
    const history: AttemptRecord[] = [];
    // A function, so the check is made each time rather than narrowed away after the first.
    const stopping = (): boolean => signal.aborted;
    for (let attempt = 1; ; attempt++) {
      // A stop during the backoff ends the retries: the record is left for the next start.
      if (stopping()) return { ok: false, aborted: true };
      const context = new HandlerContext(
        decoded.envelope,
        attempt,
        this.#o.endpoint,
        entry.name,
        signal,
        this.#contextEnv,
      );
      try {
        await this.#o.invoke(entry, method, decoded.envelope.payload, context);
        return { ok: true };
      } catch (error) {
        if (stopping()) return { ok: false, aborted: true };
        const info = toErrorInfo(error);
        if (isPermanent(policy, error) || attempt >= policy.attempts) {
          return { ok: false, aborted: false, error: info, attempt, history };
        }
        history.push({ attempt, at: this.#clock.now(), error: info });
        await sleep(this.#clock, backoffDelay(policy, attempt), signal);
      }
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
    const decoded = decodeEnvelope(record.envelope, (type) => this.#o.registry.definition(type));
    if (!decoded.ok) return { code: decoded.reason, message: decoded.message };
    const method = entry.methods.get(decoded.envelope.type);
    if (method === undefined) {
      return {
        code: 'not-replayable',
        message: `projection "${entry.name}" has no @On(${decoded.envelope.type}) method any more`,
      };
    }
    const outcome = await this.#attempts(entry, method, decoded, new AbortController().signal);
    if (outcome.ok) return undefined;
    if (outcome.aborted) return { code: 'projection-failed', message: 'the replay was stopped' };
    const facts: DeliveryFacts = {
      messageId: record.messageId,
      kind: 'event',
      type: record.type,
      endpoint: record.endpoint,
      handler: entry.name,
      attempt: outcome.attempt,
      history: outcome.history,
      partitionKey: record.partitionKey,
    };
    await this.#o.deadLetters.add(
      buildDeadLetterRecord({
        body: record.envelope,
        facts,
        handler: entry.name,
        reason: 'projection-failed',
        error: outcome.error,
        ordered: false,
        now: this.#clock.now(),
        logPosition: record.logPosition,
      }),
    );
    return { code: 'projection-failed', message: `${outcome.error.name}: ${outcome.error.message}` };
  }

  async #poison(
    lane: Lane,
    record: LogRecord,
    reason: string,
    error: ErrorInfo,
    attempt: number,
    history: AttemptRecord[],
  ): Promise<'done' | 'halt'> {
    const facts: DeliveryFacts = {
      messageId: record.id,
      kind: 'event',
      type: record.type,
      endpoint: this.#o.endpoint,
      handler: lane.entry.name,
      attempt,
      history,
      partitionKey: record.key,
    };
    const dead = buildDeadLetterRecord({
      body: record.body,
      facts,
      handler: lane.entry.name,
      reason,
      error,
      ordered: false,
      now: this.#clock.now(),
      logPosition: { topic: lane.topic, partition: lane.partition, offset: record.offset },
    });
    try {
      await this.#o.deadLetters.add(dead);
    } catch (storeError) {
      this.#logger.error('Could not store the dead letter of a projection event; halting the partition', {
        projection: lane.entry.name,
        error: toErrorInfo(storeError),
      });
      return 'halt';
    }
    this.#logger.warn('Projection event dead-lettered', {
      projection: lane.entry.name,
      topic: lane.topic,
      partition: lane.partition,
      offset: record.offset,
      reason,
    });
    return (this.#o.onPoison ?? 'skip') === 'skip' ? 'done' : 'halt';
  }
}
