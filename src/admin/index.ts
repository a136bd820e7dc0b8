export type {
  OutboxAdmin,
  ParkedOutboxPage,
  ParkedOutboxPageOptions,
  ParkedOutboxReason,
  ParkedOutboxRow,
  ReplayAllParkedOptions,
} from './outbox-admin.js';
export type { StoreAdmin } from './store-admin.js';
export type { SystemAdmin } from './system-admin.js';
export type { EndpointTopology, SubscriptionTopology, Topology } from './topology.js';
export type { AdminBrokerOptions, TransportAdmin } from './transport-admin.js';
export { subscriptionDeadLetters } from './subscription-dead-letters.js';
export type { WithTransportOptions } from './with-transport.js';
export { withTransport } from './with-transport.js';
