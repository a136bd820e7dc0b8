/**
 * amqplib, the RabbitMQ layer's driver: every module of src/rabbitmq takes its values (`connect`)
 * from here, and its types from `import type`.
 *
 * @remarks
 * amqplib is an optional peer, required (CommonJS) when this module is evaluated: synchronously, so
 * `harrier/rabbitmq` loads under `import` and under `require(esm)` alike, and a missing amqplib
 * fails the load with HarrierError `missing-dependency` saying `npm install amqplib` instead of
 * Node's ERR_MODULE_NOT_FOUND.
 */
import { createRequire } from 'node:module';
import type * as Amqp from 'amqplib';
import { requirePeers } from '../errors/require-peers.js';

const [amqplibModule] = requirePeers(
  createRequire(import.meta.url),
  ['amqplib'],
  "Harrier's RabbitMQ layer (harrier/rabbitmq)",
);

/** The amqplib module. */
export const amqplib = amqplibModule as typeof Amqp;
