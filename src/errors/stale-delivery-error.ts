import { HarrierError } from './harrier-error.js';

/** Thrown by `ack`/`nack` for a delivery id that no longer holds the message (already settled or redelivered). */
export class StaleDeliveryError extends HarrierError {
  /** The refused delivery id. */
  readonly deliveryId: string;

  constructor(deliveryId: string) {
    super(
      'stale-delivery',
      `Delivery "${deliveryId}" is no longer current: it was already acknowledged, or its message was released and redelivered under a new id; settle the newest delivery instead`,
    );
    this.deliveryId = deliveryId;
  }
}
