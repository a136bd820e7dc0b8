/**
 * The BullMQ versions Harrier is tested with: `peerDependencies.bullmq` in package.json says the
 * same, and a unit test fails when the installed BullMQ is outside it.
 *
 * @remarks
 * {@link ReceiverWorker} overrides four of BullMQ's Worker internals (listed in
 * {@link OVERRIDDEN_WORKER_METHODS}) that are not part of BullMQ's documented API, so a minor
 * release may change them without notice. The range widens only after the BullMQ tests pass on the
 * new version (see docs/redis.md, "Which BullMQ").
 */
export const TESTED_BULLMQ_RANGE = '>=6.7.0 <6.8.0';

/** The Worker methods {@link ReceiverWorker} overrides, with the parameter count each has in the tested versions. */
export const OVERRIDDEN_WORKER_METHODS: Readonly<Record<string, number>> = {
  moveToActive: 2,
  processJob: 2,
  nextJobFromJobData: 3,
  createJob: 2,
};
