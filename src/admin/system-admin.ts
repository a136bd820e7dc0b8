import type { StoreAdmin } from './store-admin.js';
import type { TransportAdmin } from './transport-admin.js';

/**
 * A whole Harrier system as a tool opens it from one URL: its stores and its transport. What the
 * `harrier` CLI and `harrier dashboard` work on, whatever the backend.
 */
export interface SystemAdmin extends StoreAdmin, TransportAdmin {
  /** Closes the stores, the broker and the connection opened through this admin. */
  close(): Promise<void>;
}
