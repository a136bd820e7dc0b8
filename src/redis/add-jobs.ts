import { HarrierError } from '../errors/harrier-error.js';

/** Most tries to add the jobs of one batch. */
export const ADD_TRIES = 3;

/**
 * Adds jobs with `addBulk`, then checks each returned id and adds again only the jobs that failed.
 *
 * @remarks
 * BullMQ's `addBulk` runs a pipeline, not a transaction: a job whose script fails does not throw but
 * comes back with a negative number as its id while the others are stored. Ignoring that would lose
 * messages whose publish had resolved; re-adding is safe because job ids are message ids.
 * @throws HarrierError `publish-failed` when some jobs still fail after {@link ADD_TRIES} tries.
 */
export async function addJobsChecked<J>(
  queueName: string,
  jobs: readonly J[],
  addBulk: (jobs: readonly J[]) => Promise<readonly { readonly id?: unknown }[]>,
  onRetry: (failed: number) => void,
): Promise<void> {
  let remaining = jobs;
  for (let attempt = 1; remaining.length > 0; attempt++) {
    const added = await addBulk(remaining);
    // Collected only when some job failed: the common all-added batch allocates nothing here.
    let failed: J[] | undefined;
    for (let index = 0; index < remaining.length; index++) {
      const id = added[index]?.id;
      if (typeof id !== 'string' || id.length === 0) (failed ??= []).push(remaining[index] as J);
    }
    if (failed === undefined) return;
    if (attempt >= ADD_TRIES) {
      throw new HarrierError(
        'publish-failed',
        `${failed.length} of ${jobs.length} message(s) could not be added to queue ${queueName} after ${attempt} tries; publish them again (same ids are deduplicated)`,
      );
    }
    onRetry(failed.length);
    remaining = failed;
  }
}
