/**
 * The `harrier/rabbitmq` entry point: {@link RabbitMqBroker}, the message broker on a RabbitMQ server.
 *
 * @remarks
 * amqplib is an optional peer dependency, required synchronously by rabbitmq-peers.ts when this
 * module loads: an app without it gets HarrierError `missing-dependency` naming `npm install
 * amqplib` (from `import` and from `require` alike). Keep it so: no module of src/rabbitmq imports a
 * value from amqplib other than through rabbitmq-peers.ts, and no top-level `await`, so
 * `require('harrier/rabbitmq')` works.
 */
// First: without amqplib, loading stops here with the error that names `npm install amqplib`.
import './rabbitmq-peers.js';

export type {
  RabbitMqBrokerOptions,
  RabbitMqConnectionOptions,
  RabbitMqQueueType,
} from './rabbitmq-broker.js';
export { RabbitMqBroker } from './rabbitmq-broker.js';
