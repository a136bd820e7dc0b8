import type { DeliveryLedger } from '../broker/delivery-ledger.js';
import type { MessageBroker } from '../broker/message-broker.js';
import type { Logger } from '../logging/logger.js';
import type { Topology } from './topology.js';

/** Options of {@link TransportAdmin.broker}. */
export interface AdminBrokerOptions {
  /**
   * Where the broker reports what it cannot throw.
   * @defaultValue the backend broker's own default
   */
  readonly logger?: Logger;
  /**
   * The delivery ledger the system's brokers share, for a broker that keeps one beside its queues
   * (RabbitMQ): a replay through it replaces a copy still queued instead of adding one. It stays the
   * caller's (closing the broker leaves it open); a broker that needs none ignores it.
   * @defaultValue undefined (no ledger)
   */
  readonly ledger?: DeliveryLedger;
}

/**
 * What a tool reads and does on the transport of a Harrier system, whatever the broker: the
 * registered topology with queue depths, and a broker to send messages back through (a replay).
 *
 * @remarks
 * Each broker folder implements it next to its broker (`RedisAdmin` in `harrier/redis`), reading
 * the broker's state through the broker's own naming, so a tool never repeats a layout.
 */
export interface TransportAdmin {
  /** Every registered endpoint, its subscriptions, and how many messages each of their queues holds. */
  topology(): Promise<Topology>;
  /**
   * A broker of the system, set up as the system's own brokers agreed (partition count and the
   * like); it is closed with the admin.
   */
  broker(options?: AdminBrokerOptions): Promise<MessageBroker>;
  /** Closes everything opened through this admin. */
  close(): Promise<void>;
}
