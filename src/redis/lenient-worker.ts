import { Job, Worker } from 'bullmq';

/** The stored form of a job, as BullMQ reads it from Redis. */
type JobJson = Parameters<typeof Job.fromJSON>[1];

/**
 * A Worker that survives job data that is not JSON (written into Redis by something other than
 * BullMQ): the raw text reaches the processor as a string and is dead-lettered as malformed, instead
 * of failing inside BullMQ before the processor and stalling forever.
 */
export class LenientWorker<T> extends Worker<T> {
  protected override createJob(data: JobJson, jobId: string): Job<T> {
    try {
      return super.createJob(data, jobId);
    } catch {
      return super.createJob({ ...data, data: JSON.stringify(data.data) }, jobId);
    }
  }
}
