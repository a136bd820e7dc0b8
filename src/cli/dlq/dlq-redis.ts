import type { MessageBroker } from '../../broker/message-broker.js';
import type { DeadLetterStore } from '../../dead-letters/dead-letter-store.js';
import { silentLogger } from '../../logging/logger.js';
import { loadRedisLayer } from '../../redis/load-redis-layer.js';
import { connect, type CommandContext } from '../cli-context.js';

/** What `harrier dlq` works on: the dead-letter store, and a broker to send records back through. */
export interface DlqBackend {
  readonly store: DeadLetterStore;
  /**
   * A broker on the same Redis with the system's partition count, to redeliver through; it is closed
   * with the backend.
   */
  readonly openBroker: () => Promise<MessageBroker>;
}

/**
 * Runs `body` with the dead-letter store (and on demand a broker) of the Redis `ctx` names, and
 * releases both afterwards.
 *
 * @remarks
 * The only place in the dlq commands that touches Redis: the client, the partition-count key and the
 * Redis classes. Everything else sees the store and broker contracts.
 */
export async function withDlqBackend<T>(
  ctx: CommandContext,
  body: (backend: DlqBackend) => Promise<T>,
): Promise<T> {
  const client = await connect(ctx);
  try {
    const { BullMqBroker, RedisDeadLetterStore } = await loadRedisLayer();
    const store = new RedisDeadLetterStore({ connection: client, prefix: ctx.prefix });
    let broker: MessageBroker | undefined;
    try {
      return await body({
        store,
        openBroker: async () => {
          const partitions = Number((await client.get(`${ctx.prefix}:harrier:partitions`)) ?? '8');
          broker ??= new BullMqBroker({
            connection: ctx.cluster === undefined ? ctx.redisUrl : { cluster: [...ctx.cluster] },
            prefix: ctx.prefix,
            partitions,
            logger: silentLogger,
          });
          return broker;
        },
      });
    } finally {
      await broker?.close();
      await store.close();
    }
  } finally {
    client.disconnect();
  }
}
