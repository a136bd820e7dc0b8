import type { DeliveryLedger } from '../broker/delivery-ledger.js';
import type { SystemAdmin } from './system-admin.js';
import type { TransportAdmin } from './transport-admin.js';

/** Options of {@link withTransport}. */
export interface WithTransportOptions {
  /**
   * Whether the transport's broker replays through the delivery ledger of the stores
   * (`StoreAdmin.deliveryLedger`); false for a system whose brokers run without one, so a
   * replay is published as theirs are (a copy still queued is then doubled).
   * @defaultValue true (when the stores' backend keeps a ledger)
   */
  readonly ledger?: boolean;
}

/**
 * A {@link SystemAdmin} whose stores are `stores`' and whose transport (topology, the broker to
 * replay through) is the admin `openTransport` opens: a system whose broker is not where its stores
 * are (RabbitMQ carries the messages, Redis or PostgreSQL keeps the dead letters, sagas,
 * checkpoints and schedules).
 *
 * @remarks
 * The transport is opened on first use of `topology` or `broker`, so a command that reads stores
 * only (`harrier dlq list`) never connects to the broker. Closing closes the transport (when it was
 * opened), then the stores.
 *
 * The broker replays through the stores' delivery ledger (`StoreAdmin.deliveryLedger`) unless
 * `options.ledger` is false: the system's brokers admit each copy through that ledger, so a replay
 * registered there replaces a copy still queued (or finds it `held` for a retry) instead of adding
 * a second one.
 * @param openTransport - opens the transport admin; called at most once (a failed open is tried
 *   again on the next use).
 */
export function withTransport(
  stores: SystemAdmin,
  openTransport: () => Promise<TransportAdmin>,
  options: WithTransportOptions = {},
): SystemAdmin {
  let transport: Promise<TransportAdmin> | undefined;
  let closed = false;
  const opened = (): Promise<TransportAdmin> => {
    if (transport === undefined) {
      const opening = openTransport();
      transport = opening;
      opening.catch(() => {
        if (transport === opening) transport = undefined;
      });
    }
    return transport;
  };
  // Only a backend with a transactional outbox (PostgreSQL) has one.
  const outboxAdmin = stores.outboxAdmin?.bind(stores);
  const deliveryLedger = options.ledger === false ? undefined : stores.deliveryLedger?.bind(stores);
  let ledger: DeliveryLedger | undefined;
  return {
    deadLetterStore: () => stores.deadLetterStore(),
    checkpointStore: () => stores.checkpointStore(),
    sagaStore: (options) => stores.sagaStore(options),
    scheduleStore: () => stores.scheduleStore(),
    projectionLags: (projection) => stores.projectionLags(projection),
    eventLogNote: stores.eventLogNote,
    ...(outboxAdmin !== undefined ? { outboxAdmin } : {}),
    ...(deliveryLedger !== undefined ? { deliveryLedger } : {}),
    topology: async () => (await opened()).topology(),
    broker: async (brokerOptions) => {
      const transport = await opened();
      if (deliveryLedger !== undefined) ledger ??= deliveryLedger();
      return transport.broker({ ...brokerOptions, ...(ledger !== undefined ? { ledger } : {}) });
    },
    async close() {
      if (closed) return;
      closed = true;
      const transportClosed = transport?.then(
        (admin) => admin.close(),
        () => undefined,
      );
      try {
        await transportClosed;
      } finally {
        await stores.close();
      }
    },
  };
}
