import type { SystemAdmin } from './system-admin.js';
import type { TransportAdmin } from './transport-admin.js';

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
 * @param openTransport - opens the transport admin; called at most once (a failed open is tried
 *   again on the next use).
 */
export function withTransport(
  stores: SystemAdmin,
  openTransport: () => Promise<TransportAdmin>,
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
  return {
    deadLetterStore: () => stores.deadLetterStore(),
    checkpointStore: () => stores.checkpointStore(),
    sagaStore: (options) => stores.sagaStore(options),
    scheduleStore: () => stores.scheduleStore(),
    projectionLags: (projection) => stores.projectionLags(projection),
    eventLogNote: stores.eventLogNote,
    ...(outboxAdmin !== undefined ? { outboxAdmin } : {}),
    topology: async () => (await opened()).topology(),
    broker: async (options) => (await opened()).broker(options),
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
