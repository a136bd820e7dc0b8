import type { DeliveryLedger } from '../broker/delivery-ledger.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import type { CheckpointStore } from '../log/checkpoint-store.js';
import type { CheckpointLag } from '../projections/projection-lag.js';
import type { SagaStore } from '../sagas/saga-store.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';

/**
 * What a tool reads and does on the stores of a Harrier system, whatever holds them: dead letters,
 * projection checkpoints and their lag, saga instances, recurring schedules.
 *
 * @remarks
 * Each backend folder implements it next to its stores (`RedisAdmin` in `harrier/redis`); the
 * stores it hands out are the system's own, on the admin's connection, and close with it.
 */
export interface StoreAdmin {
  /** The system's dead-letter store. */
  deadLetterStore(): DeadLetterStore;
  /** The system's checkpoint store. */
  checkpointStore(): CheckpointStore;
  /**
   * The system's saga store.
   *
   * @remarks
   * Reading needs no retention; pass the application's `completedRetentionMs` only to save through it.
   */
  sagaStore(options?: { readonly completedRetentionMs?: number }): SagaStore;
  /** The system's store of recurring schedules (`bus.every`). */
  scheduleStore(): ScheduleStore;
  /**
   * Checkpoint, log end and lag of each projection with checkpoints (or of `projection` alone), per
   * topic and partition, as {@link checkpointLags} computes them; empty when nothing matches.
   */
  projectionLags(projection?: string): Promise<CheckpointLag[]>;
  /**
   * Set by a backend that keeps no event log (PostgreSQL: the application's log is in Redis, a file
   * or memory): {@link StoreAdmin.projectionLags} then has no log end to compare with and returns no
   * rows, and a tool shows the checkpoints alone, with this note.
   * @defaultValue undefined (the backend holds the event log)
   */
  readonly eventLogNote?: string | undefined;
  /**
   * The delivery ledger a broker of the system keeps in these stores (`RedisDeliveryLedger` under the
   * Redis prefix, `PostgresDeliveryLedger` in the schema), on this admin's connection; closed with it.
   *
   * @remarks
   * A transport whose broker keeps its ledger elsewhere (RabbitMQ) replays through this one
   * (`withTransport`), so a replay replaces a copy still queued instead of adding one.
   * @defaultValue undefined (the backend keeps no delivery ledger)
   */
  deliveryLedger?(): DeliveryLedger;
  /** Closes everything opened through this admin. */
  close(): Promise<void>;
}
