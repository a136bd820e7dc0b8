import type { QueueDepth } from './message-broker.js';

/** The depths of `depths` added up, under the name `queue` (a subscription's partition queues, a total). */
export function sumQueueDepths(queue: string, depths: readonly QueueDepth[]): QueueDepth {
  let waiting = 0;
  let active = 0;
  let delayed = 0;
  for (const depth of depths) {
    waiting += depth.waiting;
    active += depth.active;
    delayed += depth.delayed;
  }
  return { queue, waiting, active, delayed };
}
