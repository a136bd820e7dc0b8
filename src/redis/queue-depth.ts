import type { QueueDepth } from '../broker/message-broker.js';

/** The BullMQ job states a {@link QueueDepth} is counted from (`getJobCounts(...DEPTH_STATES)`). */
export const DEPTH_STATES = ['wait', 'prioritized', 'active', 'delayed'] as const;

/**
 * One BullMQ queue's depth from its job counts: `waiting` is BullMQ's wait and prioritized jobs.
 *
 * @remarks
 * Failed jobs are left out: a failed job is a dead-lettered message, and dead letters are counted
 * in the dead-letter store, which has every one of them (BullMQ keeps failed jobs only for a while).
 */
export function queueDepthOf(
  queue: string,
  counts: Readonly<Record<string, number | undefined>>,
): QueueDepth {
  return {
    queue,
    waiting: (counts.wait ?? 0) + (counts.prioritized ?? 0),
    active: counts.active ?? 0,
    delayed: counts.delayed ?? 0,
  };
}
