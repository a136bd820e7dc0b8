import type { QueueDepth, SubscriptionSpec } from '../broker/message-broker.js';

/** One subscription of a registered endpoint, with the depths of its queues. */
export interface SubscriptionTopology {
  readonly subscription: SubscriptionSpec;
  /**
   * Each queue the subscription is delivered from, as its broker names it: the subscription's own
   * queue first, then its partition queues when it has ordered types (a broker that keeps one queue
   * per subscription lists one).
   */
  readonly queues: readonly QueueDepth[];
  /**
   * The sums over {@link SubscriptionTopology.queues}, named after the subscription's own queue:
   * the row the broker's `queueDepths` gives for the subscription.
   */
  readonly total: QueueDepth;
}

/** An endpoint as its processes' brokers registered it. */
export interface EndpointTopology {
  readonly endpoint: string;
  /** When a process of the endpoint last registered, ms since the epoch; undefined when not recorded. */
  readonly registeredAt?: number | undefined;
  readonly subscriptions: readonly SubscriptionTopology[];
}

/** What a {@link TransportAdmin.topology} found: the registered endpoints and their queues. */
export interface Topology {
  /** Registered endpoints, by name. */
  readonly endpoints: readonly EndpointTopology[];
  /**
   * Endpoints whose registration could not be read (something other than a Harrier broker wrote
   * it), skipped.
   * @defaultValue []
   */
  readonly unreadable?: readonly string[] | undefined;
  /**
   * What the backend could not tell, for a tool to show beside the endpoints (e.g. that the system's
   * broker keeps its registrations elsewhere).
   * @defaultValue undefined (nothing to add)
   */
  readonly note?: string | undefined;
}
