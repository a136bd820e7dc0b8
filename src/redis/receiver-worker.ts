import type { Job, Processor, WorkerOptions } from 'bullmq';
import type { SlotBudget } from '../broker/slot-budget.js';
import { bullmq } from './redis-peers.js';

/** The stored form of a job, as BullMQ reads it from Redis. */
type JobJson = Parameters<typeof Job.fromJSON>[1];

/** BullMQ's answer for "no job", which its types do not admit. */
const NO_JOB = undefined as unknown as Job;

/**
 * The BullMQ Worker of one queue of a receiver: it fetches jobs only within the receiver's
 * {@link SlotBudget}, and it survives job data that is not JSON.
 *
 * @remarks
 * BullMQ's concurrency is per worker, and a worker serves one queue, so a receiver of Q queues could
 * otherwise lock Q times its prefetch. BullMQ fetches a job in two places, and both hold a slot:
 *
 * - `moveToActive` (its run loop's fetch): waits for a slot first, gives it back if nothing came.
 * - fetch-next, the next job fetched by the script that settles the previous one (no extra round
 *   trip): the settled job passes its own slot on to the job fetched next, allowed only while no
 *   other worker waits for a slot ({@link SlotBudget.mayPassOn}), so a busy queue cannot keep the
 *   budget from queues waiting their turn. Refused, the slot goes back to the longest waiter and the
 *   worker asks again through `moveToActive`; BullMQ would mark the worker drained for the empty
 *   answer and block up to `drainDelay` on a queue that still holds jobs, so that answer is not
 *   passed on.
 *
 * A job's slot is given back when `processJob` is done with it (completed, failed, delayed or back to
 * wait) unless a job fetched next took it over. BullMQ keeps its own loop, blocking waits, lock
 * renewal and stalled-job checks.
 *
 * Job data that is not JSON (written into Redis by something other than BullMQ) reaches the
 * processor as a string and is dead-lettered as malformed, instead of failing inside BullMQ before
 * the processor and stalling forever.
 */
export class ReceiverWorker<T> extends bullmq.Worker<T> {
  readonly #budget: SlotBudget;
  /** Tokens whose settled job passes its slot on to the job fetched next. */
  readonly #passedOn = new Set<string>();
  /** Tokens refused a fetch-next (others wait for a slot). */
  readonly #refused = new Set<string>();
  /** Jobs fetched whose `processJob` has not started: they hold slots this worker must not wait on. */
  #unstarted = 0;
  /** Ends this worker's wait for a slot once it holds a fetched job it has not started. */
  #slotWait: AbortController | undefined;

  /** Takes `autorun: false` in `options`: call `run()` once constructed. */
  constructor(name: string, processor: Processor<T>, options: WorkerOptions, budget: SlotBudget) {
    super(name, processor, { ...options, autorun: false });
    this.#budget = budget;
  }

  protected override async moveToActive(token: string, name?: string): Promise<Job<T>> {
    if (!this.#passedOn.delete(token) && !(await this.#slot())) return NO_JOB;
    if (this.closing !== undefined) {
      this.#budget.release();
      return NO_JOB;
    }
    let job: Job<T> | undefined;
    try {
      job = await super.moveToActive(token, name);
    } finally {
      if (job === undefined) this.#budget.release();
    }
    return job;
  }

  override async processJob(
    job: Job<T>,
    token: string,
    fetchNextCallback: () => boolean = () => true,
  ): Promise<void | Job<T>> {
    this.#unstarted--;
    let offered = false;
    let next: void | Job<T> = undefined;
    try {
      next = await super.processJob(job, token, () => {
        offered = fetchNextCallback() && this.#mayFetchNext(token);
        return offered;
      });
      return next;
    } finally {
      this.#refused.delete(token);
      // The slot goes back unless the job fetched next took it over. Passed on to `moveToActive`
      // (BullMQ's fetch after a delayed or released job), it is that call's to give back.
      if (this.#passedOn.delete(token) ? next === undefined : !offered) this.#budget.release();
    }
  }

  protected override async nextJobFromJobData(
    jobData?: JobJson,
    jobId?: string,
    token?: string,
  ): Promise<Job<T>> {
    // An empty answer to a fetch-next this worker refused says nothing about the queue: not drained.
    if (jobData === undefined && token !== undefined && this.#refused.has(token)) return NO_JOB as Job<T>;
    const job = await super.nextJobFromJobData(jobData, jobId, token);
    if ((job as Job<T> | undefined) !== undefined) {
      this.#unstarted++;
      this.#slotWait?.abort();
    }
    return job;
  }

  protected override createJob(data: JobJson, jobId: string): Job<T> {
    try {
      return super.createJob(data, jobId);
    } catch {
      return super.createJob({ ...data, data: JSON.stringify(data.data) }, jobId);
    }
  }

  /**
   * A slot for a fetch. A worker holding fetched jobs it has not started only takes a free one, and
   * stops waiting once it gets one: BullMQ starts them only once this fetch returns, so waiting could
   * leave every slot held by jobs nobody starts. Its empty answer is not a drained queue (BullMQ is
   * never asked), and sends BullMQ off to start the jobs it holds.
   */
  async #slot(): Promise<boolean> {
    if (this.#unstarted > 0) return this.#budget.tryAcquire();
    const wait = new AbortController();
    this.#slotWait = wait;
    try {
      return await this.#budget.acquire(wait.signal);
    } finally {
      if (this.#slotWait === wait) this.#slotWait = undefined;
    }
  }

  #mayFetchNext(token: string): boolean {
    if (this.#passedOn.has(token)) return true;
    if (this.#refused.has(token)) return false;
    if (this.closing === undefined && this.#budget.mayPassOn()) {
      this.#passedOn.add(token);
      return true;
    }
    this.#refused.add(token);
    return false;
  }
}
