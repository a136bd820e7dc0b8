import type * as RabbitMqLayerModule from './rabbitmq-layer.js';

/** The RabbitMQ layer's classes and functions, as {@link loadRabbitMqLayer} loads them. */
export type RabbitMqLayer = typeof RabbitMqLayerModule;

let loading: Promise<RabbitMqLayer> | undefined;

/**
 * Loads the RabbitMQ layer once, on first call, so the CLI loads amqplib only for a command that
 * connects to RabbitMQ (`--rabbitmq-url`). The layer checks its peer as it loads (rabbitmq-peers.ts).
 * @throws HarrierError `missing-dependency` naming `npm install amqplib` when amqplib is not installed.
 */
export function loadRabbitMqLayer(): Promise<RabbitMqLayer> {
  loading ??= import('./rabbitmq-layer.js');
  return loading;
}
