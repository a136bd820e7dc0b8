import type { Job, Worker } from 'bullmq';
import type { Cluster, Redis } from 'ioredis';
import { MAX_ATTEMPT_HISTORY, type Delivery, type ReceiverOptions } from '../broker/message-broker.js';
import { commandQueue } from '../broker/queue-names.js';
import type { Clock } from '../clock/clock.js';
import { settlesWithin } from '../clock/deadline.js';
import { sleep } from '../clock/sleep.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { Logger } from '../logging/logger.js';
import { AsyncInbox } from '../broker/async-inbox.js';
import type { ClientSettings } from './broker-connection.js';
import { KEEP_ATTEMPTS, readJobData, type JobData, type ParsedJobData } from './job-data.js';
import { RELEASE, type Outcome, type Pending, type PendingDeliveries } from '../broker/pending-deliveries.js';
import type { QueueSpec } from './queue-layout.js';
import { ReceiverWorker } from './receiver-worker.js';
import { bullmq } from './redis-peers.js';
import { SlotBudget } from '../broker/slot-budget.js';

/** How long closing a receiver waits for BullMQ's workers once none of its jobs is held any more. */
const WORKER_CLOSE_GRACE_MS = 3_000;

const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

/** What a receiver shares with the broker that made it. */
export interface BullMqReceiverContext {
  readonly prefix: string;
  readonly lockDurationMs: number;
  readonly lockRenewMs: number;
  readonly stalledIntervalMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** The broker's unsettled deliveries, which its ack and nack settle. */
  readonly pending: PendingDeliveries;
  /** Adds a job, as it is, to the queue of its command type (see {@link QueueSpec.types}). */
  readonly toTypeQueue: (job: Job<JobData>) => Promise<void>;
  readonly newClient: (settings: ClientSettings, role: string) => Redis | Cluster;
}

/** A delivery in the inbox, which is also its entry in the broker's pending deliveries. */
interface Held extends Pending {
  readonly delivery: Delivery;
}

type Inbox = AsyncInbox<Held>;

/**
 * One receiver of a {@link BullMqBroker}: the bridge from BullMQ's push (a worker per queue calling
 * a processor) to the broker's pull (`receiver()` yields deliveries).
 *
 * @remarks
 * Each processor puts its job into the receiver's inbox as a delivery and waits for the dispatcher's
 * ack or nack, so BullMQ's lock renewal and stalled-job recovery cover every delivery.
 */
export class BullMqReceiver implements AsyncIterator<Delivery> {
  readonly #context: BullMqReceiverContext;
  readonly #options: ReceiverOptions;
  readonly #queues: readonly QueueSpec[];
  readonly #inbox: Inbox = new AsyncInbox();
  /** Jobs this receiver holds across all its queues: never more than its prefetch. */
  readonly #budget: SlotBudget;
  readonly #workers: Worker[] = [];
  readonly #clients: (Redis | Cluster)[] = [];
  /** This receiver's processors that have not returned yet. */
  #running = 0;
  /** Resolves `close()`'s wait once no processor runs. */
  #idle: (() => void) | undefined;
  #closing: Promise<void> | undefined;
  #started = false;
  #ended = false;
  /** The `next()` waiting for a delivery, which a `next()` called meanwhile waits behind. */
  #waiting: Promise<IteratorResult<Delivery>> | undefined;
  readonly #onEnd: () => void;

  /**
   * @param queues - the queues of the endpoint to work, a worker each.
   * @param onEnd - called once the iteration ends (closed, aborted or returned).
   */
  constructor(
    context: BullMqReceiverContext,
    options: ReceiverOptions,
    queues: readonly QueueSpec[],
    onEnd: () => void,
  ) {
    this.#context = context;
    this.#onEnd = onEnd;
    this.#options = options;
    this.#queues = queues;
    this.#budget = new SlotBudget(options.prefetch ?? 16);
  }

  /**
   * The next delivery: starts a worker per queue on the first call, and ends (closing the receiver)
   * once closed, or aborted with nothing left in the inbox.
   *
   * @remarks
   * A hand-written iterator instead of an async generator: a delivery already in the inbox is handed
   * over in one resolved promise, without the generator's own promise and microtask hops per item.
   */
  next(): Promise<IteratorResult<Delivery>> {
    if (this.#ended) return Promise.resolve(DONE);
    const waiting = this.#waiting;
    if (waiting !== undefined) return waiting.then(() => this.next());
    if (!this.#started) {
      // Closed (the broker was) before the first call: start nothing.
      if (this.#closing !== undefined) return this.#end();
      this.#started = true;
      try {
        this.#start();
      } catch (error) {
        return this.#end().then(() => Promise.reject(error as Error));
      }
    }
    const item = this.#inbox.take();
    if (item !== undefined) return Promise.resolve({ done: false, value: item.delivery });
    const next = this.#inbox
      .next(this.#options.signal)
      .then((taken): Promise<IteratorResult<Delivery>> | IteratorResult<Delivery> => {
        this.#waiting = undefined;
        if (taken === undefined) return this.#end();
        // Handed to this wait by its push, then the receiver closed (return(), close()) before the wait
        // resumed: nobody takes it now, so it goes back to its queue as if drained by close().
        if (this.#inbox.closed) {
          if (this.#context.pending.delete(taken.delivery.id)) taken.settle(RELEASE);
          return this.#end();
        }
        return { done: false, value: taken.delivery };
      });
    this.#waiting = next;
    return next;
  }

  /** Ends the iteration and closes the receiver. */
  return(): Promise<IteratorResult<Delivery>> {
    return this.#end();
  }

  async #end(): Promise<IteratorReturnResult<undefined>> {
    this.#ended = true;
    this.#onEnd();
    await this.close();
    return DONE;
  }

  /** Starts a worker per queue; their jobs become deliveries in the inbox. */
  #start(): void {
    const { endpoint } = this.#options;
    const { prefix, logger, pending } = this.#context;
    // One command connection for every worker of this receiver (BullMQ gives each worker its own
    // blocking duplicate): queues + 1 connections instead of 2 per queue.
    const connection = this.#context.newClient({ maxRetriesPerRequest: null }, `workers:${endpoint}`);
    // Connection errors repeat while Redis is away, and the workers report them already (below).
    connection.on('error', (error: Error) => {
      logger.debug('Redis connection of the workers failed; reconnecting', {
        endpoint,
        error: error.message,
      });
    });
    this.#clients.push(connection);
    for (const queue of this.#queues) {
      const { name, concurrency } = queue;
      const worker = new ReceiverWorker<JobData>(
        name,
        (job, token) => this.#process(job, token ?? '', queue),
        {
          connection,
          prefix,
          concurrency,
          lockDuration: this.#context.lockDurationMs,
          lockRenewTime: this.#context.lockRenewMs,
          stalledInterval: this.#context.stalledIntervalMs,
          // A stalled job (its worker died) always goes back to wait: the crash counts as an attempt
          // and an unsettled end through `stalledCounter`, and the dispatcher dead-letters it
          // (`worker-crashed`) once those reach its crash limit.
          maxStalledCount: KEEP_ATTEMPTS,
          settings: { backoffStrategy: () => 1_000 },
          runRetryDelay: 1_000,
        },
        this.#budget,
      );
      let lastWarned = 0;
      worker.on('error', (error: Error) => {
        // Connection errors repeat while Redis is away: warn at most every 10 s per worker.
        const now = this.#context.clock.now();
        if (now - lastWarned < 10_000) return;
        lastWarned = now;
        logger.warn('BullMQ worker error', { queue: name, error: error.message });
      });
      worker.on('lockRenewalFailed', (jobIds: string[]) => {
        pending.lose(name, jobIds);
      });
      this.#workers.push(worker);
      worker.run().catch((error: unknown) => {
        worker.emit('error', error instanceof Error ? error : new Error(String(error)));
      });
    }
  }

  /** Stops taking jobs, gives back the ones never taken, and waits for every held one to settle. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      const { logger, pending } = this.#context;
      this.#inbox.close();
      // Deliveries handed to the receiver but never taken go straight back to their queue.
      for (const held of this.#inbox.drain()) {
        if (pending.delete(held.delivery.id)) held.settle({ kind: 'release' });
      }
      const closed = Promise.all(this.#workers.map((w) => w.close().catch(() => undefined)));
      // After the workers are closing (in the same turn), so a worker refused a slot stops fetching.
      this.#budget.close();
      // Each processor ends once its delivery is settled (acked, nacked or released by the
      // dispatcher, or released by broker.close()): that wait has no bound of its own.
      if (this.#running > 0) await new Promise<void>((resolve) => (this.#idle = resolve));
      // After that BullMQ only has its own loop to end. On Redis Cluster, BullMQ 6.7 can spend up to
      // 30 s re-connecting the blocking connection it is closing; nothing is held by then, so stop
      // waiting after a short while and let it finish in the background.
      if (!(await settlesWithin(closed, WORKER_CLOSE_GRACE_MS))) {
        logger.warn('BullMQ workers still closing; not waiting for them', {
          endpoint: this.#options.endpoint,
          waitedMs: WORKER_CLOSE_GRACE_MS,
        });
      }
      for (const client of this.#clients) client.disconnect();
    })();
    return this.#closing;
  }

  /**
   * BullMQ's processor: hands the job to the inbox as a delivery and ends once it is settled.
   *
   * @remarks
   * Kept to the acked case, which is almost every job: the other outcomes are {@link #afterOutcome}'s.
   */
  async #process(job: Job<JobData>, token: string, queue: QueueSpec): Promise<void> {
    // Counted without a promise per job: close() waits for this to reach 0.
    this.#running++;
    try {
      if (queue.types !== undefined && !queue.types.has(job.name)) {
        // Not a type this endpoint orders (any more): completed here once it waits in its own queue.
        await this.#context.toTypeQueue(job);
        return;
      }
      const jobId = job.id ?? '';
      const parsed = readJobData(job.data, jobId, queue.kind);
      if (parsed.dropped.length > 0) {
        this.#context.logger.warn('Malformed delivery facts in a job were dropped', {
          queue: queue.name,
          jobId,
          fields: parsed.dropped,
        });
      }
      const result = await this.#deliver(job, token, queue, parsed, 0);
      if (result.kind !== 'ack') await this.#afterOutcome(job, token, queue, parsed, result);
    } finally {
      if (--this.#running === 0) this.#idle?.();
    }
  }

  /** Puts a job into the inbox as a delivery; resolves with how it was settled. */
  #deliver(
    job: Job<JobData>,
    token: string,
    queue: QueueSpec,
    parsed: ParsedJobData,
    round: number,
  ): Promise<Outcome> {
    const inbox = this.#inbox;
    if (inbox.closed) return job.moveToWait(token).then(() => Promise.reject(new bullmq.WaitingError()));
    const jobId = job.id ?? '';
    // The delivery id starts with the job's lock token (BullMQ's `<worker id>:<n>`). BullMQ hands the
    // same token on to the next job a worker slot fetches, even the same job again after a release, so
    // the job id and its start count follow: a settle from an earlier delivery never matches. An ordered
    // retry keeps the lock and runs again in place: each round after the first gets its own suffix.
    const lockId = `${token}|${jobId}|${job.attemptsStarted}`;
    const deliveryId = round === 0 ? lockId : `${lockId}#${round}`;
    let settle!: (outcome: Outcome) => void;
    const outcome = new Promise<Outcome>((resolve) => (settle = resolve));
    // One object is both the broker's pending entry and the inbox item.
    const held: Held = {
      queue: queue.name,
      jobId,
      settle,
      delivery: {
        id: deliveryId,
        body: parsed.body,
        facts: {
          messageId: parsed.messageId,
          kind: parsed.kind,
          type: parsed.kind === undefined ? undefined : job.name,
          endpoint: this.#options.endpoint,
          handler: queue.handler,
          attempt: attemptOf(job, parsed),
          unsettledEnds: stalledCountOf(job),
          history: parsed.history,
          partitionKey: parsed.partitionKey,
          // A queue shared by command types reports each job's own type's queue, as its type's
          // queue would: the dead letter's id does not depend on which queue the job went through.
          queue: queue.reportedAs ?? commandQueue(job.name),
          // Set directly, not spread in: no object made per delivery for facts almost always absent.
          pendingDeadLetter: parsed.pendingDeadLetter,
          replayOf: parsed.replayOf,
        },
      },
    };
    this.#context.pending.add(deliveryId, held);
    inbox.push(held);
    return outcome;
  }

  /** Carries out an outcome other than the first round's ack: dead letter, lost lock, release or retry. */
  async #afterOutcome(
    job: Job<JobData>,
    token: string,
    queue: QueueSpec,
    first: ParsedJobData,
    firstResult: Outcome,
  ): Promise<void> {
    const { clock } = this.#context;
    const jobId = job.id ?? '';
    let parsed = first;
    let result = firstResult;
    for (let round = 1; ; round++) {
      switch (result.kind) {
        case 'ack':
          return;
        case 'dead':
          throw new bullmq.UnrecoverableError(`dead-lettered: ${result.reason}`);
        case 'lost':
          // Another worker owns the job now; nothing this one does can settle it.
          throw new HarrierError('lock-lost', `Lost the lock of job ${jobId}`);
        case 'release':
          if (result.retryAt !== undefined && result.retryAt > clock.now()) {
            if (!queue.ordered) {
              // Uncounted: the job data keeps its attempts, and a manual delay moves no BullMQ counter.
              await job.moveToDelayed(wallClockIn(result.retryAt - clock.now()), token);
              throw new bullmq.DelayedError();
            }
            // Ordered: held until then, as a retry is, so no later message of its key overtakes it.
            this.#budget.release();
            await sleep(clock, result.retryAt - clock.now(), this.#inbox.closedSignal);
            await this.#budget.acquire();
            result = await this.#deliver(job, token, queue, parsed, round);
            break;
          }
          await job.moveToWait(token);
          throw new bullmq.WaitingError();
        case 'retry': {
          const failed = (parsed.attemptsMade ?? 0) + 1;
          const history =
            result.record === undefined
              ? parsed.history
              : [...parsed.history, { ...result.record, attempt: attemptOf(job, parsed) }].slice(
                  -MAX_ATTEMPT_HISTORY,
                );
          // Rebuilt from the parsed facts, so a malformed field read from Redis is not written back.
          const next: JobData = {
            b: parsed.body,
            ...(parsed.messageId !== undefined && parsed.messageId !== jobId ? { i: parsed.messageId } : {}),
            ...(parsed.partitionKey !== undefined ? { p: parsed.partitionKey } : {}),
            ...(parsed.ordered ? { o: true } : {}),
            a: failed,
            h: history,
            ...(result.pendingDeadLetter !== undefined ? { d: result.pendingDeadLetter } : {}),
            // A retry of a replayed message is still that replay: its outcome is recorded when it is handled.
            ...(parsed.replayOf !== undefined ? { r: parsed.replayOf } : {}),
          };
          await job.updateData(next);
          if (!queue.ordered) {
            await job.moveToDelayed(wallClockIn(result.retryAt - clock.now()), token);
            throw new bullmq.DelayedError();
          }
          // Ordered: keep the job (and its partition) until the retry, so no later message overtakes it.
          // The wait holds the partition, which no other receiver may work meanwhile, but not a slot:
          // the receiver's other queues go on. Refused a slot (closing), the next round releases the job.
          this.#budget.release();
          await sleep(clock, result.retryAt - clock.now(), this.#inbox.closedSignal);
          await this.#budget.acquire();
          parsed = readJobData(next, jobId, queue.kind);
          result = await this.#deliver(job, token, queue, parsed, round);
        }
      }
    }
  }
}

/** The attempt a delivery of `job` is: the failed ones recorded, the stalled ones, and this one. */
function attemptOf(job: Job<JobData>, parsed: ParsedJobData): number {
  return (parsed.attemptsMade ?? 0) + stalledCountOf(job) + 1;
}

/**
 * How often `job` was found stalled (its lock lapsed while active) and put back: the deliveries of it
 * that ended unsettled.
 */
function stalledCountOf(job: Job<JobData>): number {
  const count = job.stalledCounter;
  return Number.isSafeInteger(count) && count > 0 ? count : 0;
}

/**
 * The wall-clock time `delayMs` from now, for BullMQ.
 *
 * @remarks
 * BullMQ schedules delayed jobs on the wall clock whatever clock the broker was given: it turns the
 * timestamp it is handed into a delay from its own `Date.now()` and scores the delayed set with it.
 * So a wait is measured on the broker's clock and handed over as a delay; no timestamp of the
 * broker's clock is ever compared with BullMQ's.
 */
function wallClockIn(delayMs: number): number {
  return Date.now() + Math.max(0, delayMs);
}
