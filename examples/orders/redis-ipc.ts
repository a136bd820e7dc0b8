/**
 * What the Redis example's producer (redis-main.ts) and its worker processes (redis-worker.ts) say
 * to each other over the IPC channel of `child_process.fork`.
 */
import type { OrderSummary } from './messages.js';

/** Environment variables the producer passes to each worker. */
export const WORKER_ENV = {
  /** The Redis URL, as the producer was given it. */
  url: 'REDIS_URL',
  /** The key prefix of this run, shared by the producer and both workers. */
  prefix: 'HARRIER_EXAMPLE_PREFIX',
} as const;

/** One lifecycle hook of a worker's bus. */
export interface ActivityReport {
  readonly kind: 'activity';
  readonly what: 'handled' | 'retrying' | 'dead-lettered';
  readonly handler: string;
  readonly type: string;
  readonly key: string;
  readonly detail: string;
}

/** A message from a worker to the producer. */
export type WorkerMessage =
  | { readonly kind: 'ready' }
  | ActivityReport
  | { readonly kind: 'summaries'; readonly rows: readonly OrderSummary[] }
  | { readonly kind: 'crm-available' }
  | { readonly kind: 'failed'; readonly error: string };

/** A message from the producer to a worker. Stopping is a SIGTERM, as a process manager sends it. */
export type ProducerMessage = { readonly kind: 'list-summaries' } | { readonly kind: 'bring-crm-back' };
