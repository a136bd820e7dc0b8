import type { AttemptRecord, PendingDeadLetter } from './message-broker.js';
import { StaleDeliveryError } from '../errors/stale-delivery-error.js';
import { SETTLED } from './settled.js';

/** How the dispatcher (or the broker, on close or a lost lock) settled a delivery. */
export type Outcome =
  | { readonly kind: 'ack' }
  | {
      readonly kind: 'retry';
      readonly retryAt: number;
      readonly record: AttemptRecord | undefined;
      readonly pendingDeadLetter: PendingDeadLetter | undefined;
    }
  | { readonly kind: 'dead'; readonly reason: string }
  /** Back unhandled and uncounted; with `retryAt`, not delivered again before then. */
  | { readonly kind: 'release'; readonly retryAt?: number | undefined }
  | { readonly kind: 'lost' };

/** The one `ack` outcome every acked delivery shares: an ack carries nothing of its own. */
export const ACK: Outcome = Object.freeze({ kind: 'ack' });

/** The one `release` outcome every released delivery shares. */
export const RELEASE: Outcome = Object.freeze({ kind: 'release' });

/** A delivery handed to a receiver whose job's processor waits for its outcome. */
export interface Pending {
  readonly queue: string;
  readonly jobId: string;
  readonly settle: (outcome: Outcome) => void;
}

/** The deliveries of one broker that are out and not yet settled, by delivery id. */
export class PendingDeliveries {
  readonly #pending = new Map<string, Pending>();

  add(deliveryId: string, pending: Pending): void {
    this.#pending.set(deliveryId, pending);
  }

  /** Settles a delivery once. @throws StaleDeliveryError (as a rejection) when it is not pending. */
  settle(deliveryId: string, outcome: Outcome): Promise<void> {
    const pending = this.#pending.get(deliveryId);
    if (pending === undefined) return Promise.reject(new StaleDeliveryError(deliveryId));
    this.#pending.delete(deliveryId);
    pending.settle(outcome);
    // The outcome is handed to the job's processor now: the step is done (see SETTLED).
    return SETTLED;
  }

  /** Forgets a delivery without settling it; true when it was pending. */
  delete(deliveryId: string): boolean {
    return this.#pending.delete(deliveryId);
  }

  /** Releases every pending delivery back to its queue. */
  releaseAll(): void {
    for (const [id, pending] of this.#pending) {
      this.#pending.delete(id);
      pending.settle(RELEASE);
    }
  }

  /** Settles as `lost` the deliveries of the jobs of `queue` whose lock BullMQ could not renew. */
  lose(queue: string, jobIds: readonly string[]): void {
    const lost = new Set(jobIds);
    for (const [id, pending] of this.#pending) {
      // A message id is the job id in every subscription queue: match the queue too.
      if (pending.queue !== queue || !lost.has(pending.jobId)) continue;
      this.#pending.delete(id);
      pending.settle({ kind: 'lost' });
    }
  }
}
