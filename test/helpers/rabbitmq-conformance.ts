/**
 * What the RabbitMQ conformance files share: a broker under test with a prefix of its own, a sibling
 * on the same prefix and ledger, and `abandon`. The suite runs in three files (with a Redis ledger,
 * with a PostgreSQL ledger, without a ledger) so that the test runner spreads them over its workers.
 */
import type { DeliveryLedger } from '../../src/broker/delivery-ledger.js';
import type { BrokerCapabilities, MessageBroker } from '../../src/broker/message-broker.js';
import { silentLogger } from '../../src/logging/logger.js';
import {
  dropChannelOf,
  RabbitMqBroker,
  type RabbitMqBrokerOptions,
} from '../../src/rabbitmq/rabbitmq-broker.js';
import type { MessageBrokerUnderTest } from '../../src/testing/message-broker-conformance.js';
import { freshBrokerPrefix, rabbitmqUrl } from './rabbitmq.js';

/** Makes brokers under test, each with a prefix of its own under one prefix per file. */
export function rabbitBrokersUnderTest(): (
  ledger: DeliveryLedger | undefined,
  cleanup: () => Promise<void>,
) => Promise<MessageBrokerUnderTest & { broker: RabbitMqBroker }> {
  const filePrefix = freshBrokerPrefix();
  let tests = 0;
  return async (ledger, cleanup) => {
    const options: RabbitMqBrokerOptions = {
      connection: await rabbitmqUrl(),
      prefix: `${filePrefix}-${String(++tests)}`,
      partitions: 4,
      logger: silentLogger,
      ...(ledger !== undefined ? { ledger } : {}),
    };
    const broker = new RabbitMqBroker(options);
    return {
      broker,
      // A second process on the same server, prefix and ledger.
      sibling: () => Promise.resolve(new RabbitMqBroker(options)),
      // The channel that took the delivery closes, as if its process died: RabbitMQ puts the message
      // back, and the quorum queue counts the return in x-delivery-count.
      abandon: (delivery) => dropChannelOf(broker, delivery.id),
      cleanup: async () => {
        await ledger?.close();
        await cleanup();
      },
    };
  };
}

/** `broker`, its `capabilities().redeliver` false. */
export function withoutRedeliverCapability(broker: RabbitMqBroker): MessageBroker {
  return new Proxy(broker, {
    get(target, property): unknown {
      if (property === 'capabilities') {
        return (): BrokerCapabilities => ({ ...target.capabilities(), redeliver: false });
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
