import type { MessageBroker } from '../../broker/message-broker.js';
import type { DeadLetterStore } from '../../dead-letters/dead-letter-store.js';
import { silentLogger } from '../../logging/logger.js';
import { openAdmin, type CommandContext } from '../cli-context.js';

/** What `harrier dlq` works on: the dead-letter store, and a broker to send records back through. */
export interface DlqBackend {
  readonly store: DeadLetterStore;
  /**
   * A broker of the system (with the partition count its brokers agreed on), to redeliver through;
   * it is closed with the backend.
   */
  readonly openBroker: () => Promise<MessageBroker>;
}

/**
 * Runs `body` with the dead-letter store (and on demand a broker) of the system `ctx` names, both
 * opened through the admin of the backend its URL picked, and closes them afterwards.
 */
export async function withDlqBackend<T>(
  ctx: CommandContext,
  body: (backend: DlqBackend) => Promise<T>,
): Promise<T> {
  const admin = await openAdmin(ctx);
  try {
    return await body({
      store: admin.deadLetterStore(),
      openBroker: () => admin.broker({ logger: silentLogger }),
    });
  } finally {
    await admin.close();
  }
}
