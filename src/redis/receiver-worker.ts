import { Job, Worker, type Processor, type WorkerOptions } from 'bullmq';
import type { SlotBudget } from './slot-budget.js';

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
 * otherwise lock Q times its prefetch. BullMQ fetches a job in two places, and both take a slot:
 *
 * - `moveToActive` (its run loop's fetch): waits for a slot first, gives it back if nothing came.
 * - fetch-next, the next job fetched by the script that settles the previous one: allowed only when
 *   a slot is free at once and no other worker waits for one, so a busy queue cannot keep the budget
 *   from queues waiting their turn. Refused, the worker asks again through `moveToActive`; BullMQ
 *   would mark the worker drained for the empty answer and block up to `drainDelay` on a queue that
 *   still holds jobs, so that answer is not passed on.
 *
 * A job's slot is given back when `processJob` is done with it (completed, failed, delayed or back to
 * wait). BullMQ keeps its own loop, blocking waits, lock renewal and stalled-job checks.
 *
 * Job data that is not JSON (written into Redis by something other than BullMQ) reaches the
 * processor as a string and is dead-lettered as malformed, instead of failing inside BullMQ before
 * the processor and stalling forever.
 */
export class ReceiverWorker<T> extends Worker<T> {
  readonly #budget: SlotBudget;
  /** Tokens whose fetch-next holds a slot already. */
  readonly #reserved = new Set<string>();
  /** Tokens refused a fetch-next (no free slot). */
  readonly #refused = new Set<string>();
  /** Jobs fetched whose `processJob` has not started: they hold slots this worker must not wait on. */
  #unstarted = 0;

  /** Takes `autorun: false` in `options`: call `run()` once constructed. */
  constructor(name: string, processor: Processor<T>, options: WorkerOptions, budget: SlotBudget) {
    super(name, processor, { ...options, autorun: false });
    this.#budget = budget;
  }

  protected override async moveToActive(token: string, name?: string): Promise<Job<T>> {
    if (!this.#reserved.delete(token) && !(await this.#slot())) return NO_JOB;
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

  override async processJob(job: Job<T>, token: string): Promise<void | Job<T>> {
    this.#unstarted--;
    let next: void | Job<T> = undefined;
    try {
      next = await super.processJob(job, token, () => this.#mayFetchNext(token));
      return next;
    } finally {
      this.#refused.delete(token);
      // A reserved slot not taken by a fetched job goes back; a fetched job keeps it.
      if (this.#reserved.delete(token) && next === undefined) this.#budget.release();
      this.#budget.release();
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
    if ((job as Job<T> | undefined) !== undefined) this.#unstarted++;
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
   * A slot for a fetch. A worker holding fetched jobs it has not started only takes a free one:
   * BullMQ starts them only once this fetch returns, so waiting could leave every slot held by jobs
   * nobody starts. Its empty answer is not a drained queue (BullMQ is never asked), and sends BullMQ
   * off to start the jobs it holds.
   */
  #slot(): Promise<boolean> {
    return this.#unstarted > 0 ? Promise.resolve(this.#budget.tryAcquire()) : this.#budget.acquire();
  }

  #mayFetchNext(token: string): boolean {
    if (this.#reserved.has(token)) return true;
    if (this.#refused.has(token)) return false;
    if (this.closing === undefined && this.#budget.tryAcquire()) {
      this.#reserved.add(token);
      return true;
    }
    this.#refused.add(token);
    return false;
  }
}
