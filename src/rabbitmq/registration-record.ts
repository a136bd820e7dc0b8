import type { SubscriptionSpec } from '../broker/message-broker.js';
import type { RabbitMqNames } from './rabbitmq-names.js';
import type { RabbitMqRegistration, RegisteredSubscription } from './rabbitmq-registry.js';
import { delayBucket, endpointTopology, type RabbitMqQueueType } from './rabbitmq-topology.js';

/**
 * The handler name under which a registration lists the partition queues an endpoint's ordered
 * command types share (they belong to no one command subscription); the same name `RedisAdmin`
 * gives them.
 */
export const ORDERED_COMMANDS = '(ordered commands)';

/** The settings of the broker that registers, as the registration records them. */
export interface RegistrationSettings {
  readonly queueType: RabbitMqQueueType;
  readonly partitions: number;
  /** The shortest and the longest delay queue, in ms (powers of two). */
  readonly minDelayBucketMs: number;
  readonly maxDelayBucketMs: number;
  /** When the endpoint registers, ms since the epoch. */
  readonly registeredAt: number;
}

/**
 * The registry record of `endpoint` registering `subscriptions` through a broker with `settings`:
 * each subscription with the queues its messages wait in, named as the broker declares them
 * ({@link endpointTopology}), the shared partition queues of its ordered commands as one more
 * subscription named {@link ORDERED_COMMANDS}, and every delay queue of the prefix.
 */
export function registrationOf(
  names: RabbitMqNames,
  endpoint: string,
  subscriptions: readonly SubscriptionSpec[],
  settings: RegistrationSettings,
): RabbitMqRegistration {
  const { queues } = endpointTopology(names, endpoint, subscriptions, settings.partitions);
  const registered: RegisteredSubscription[] = subscriptions.map((subscription) => {
    const own =
      subscription.kind === 'event'
        ? queues.filter((role) => role.kind === 'event' && role.handler === subscription.handler)
        : queues.filter(
            (role) =>
              role.kind === 'command' && role.type !== undefined && subscription.types.includes(role.type),
          );
    return { subscription, queues: own.map((role) => ({ name: role.queue })) };
  });
  const orderedCommandQueues = queues.filter((role) => role.kind === 'command' && role.type === undefined);
  if (orderedCommandQueues.length > 0) {
    const ordered = subscriptions.flatMap((spec) =>
      spec.kind === 'command' ? (spec.orderedTypes ?? []) : [],
    );
    registered.push({
      subscription: { handler: ORDERED_COMMANDS, kind: 'command', types: ordered, orderedTypes: ordered },
      queues: orderedCommandQueues.map((role) => ({ name: role.queue })),
    });
  }
  const delayQueues: string[] = [];
  for (let ms = settings.minDelayBucketMs; ms <= settings.maxDelayBucketMs; ms *= 2) {
    delayQueues.push(names.delayQueue(delayBucket(ms, settings.queueType)));
  }
  return {
    endpoint,
    registeredAt: settings.registeredAt,
    queueType: settings.queueType,
    partitions: settings.partitions,
    subscriptions: registered,
    delayQueues,
  };
}
