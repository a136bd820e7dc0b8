import type { OutboxAdmin } from './outbox-admin.js';
import type { StoreAdmin } from './store-admin.js';
import type { TransportAdmin } from './transport-admin.js';

/**
 * A whole Harrier system as a tool opens it from one URL: its stores and its transport. What the
 * `harrier` CLI and `harrier dashboard` work on, whatever the backend.
 */
export interface SystemAdmin extends StoreAdmin, TransportAdmin {
  /**
   * The parked rows of the system's transactional outbox, on this admin's connection (closed with
   * it); absent when the backend has no outbox.
   */
  outboxAdmin?(): OutboxAdmin;
  /** Closes the stores, the broker and the connection opened through this admin. */
  close(): Promise<void>;
}
