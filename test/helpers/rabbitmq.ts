/**
 * The tests' RabbitMQ: the global setup's server (RABBITMQ_URL, or one of its own), and a name
 * prefix per test file so files never see each other's exchanges and queues.
 *
 * @remarks
 * Clean-up: AMQP has no way to list exchanges or queues (only the management plugin, which our own
 * server does not load, has one), so nothing here deletes "everything under a prefix". A test deletes
 * what it declared when that matters (a `deleteQueue`/`deleteExchange` in its own `afterAll`);
 * otherwise what the tests leave behind lives in the global setup's temp server, which is deleted
 * with its data at the end of the run. Against a shared RABBITMQ_URL, the per-file prefixes keep
 * runs apart, and auto-delete or exclusive queues leave nothing behind.
 */
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { amqpAnswers, tail } from './local-rabbitmq.js';
import { waitFor } from './local-redis.js';

/** How long a test file waits for the global setup's server: it boots in about 5 s (2 vCPUs). */
const READY_TIMEOUT_MS = 60_000;

let ready: Promise<string> | undefined;

/**
 * The tests' RabbitMQ URL, once it accepts connections (the global setup does not wait for the boot
 * of its own server): call it in `beforeAll` (with a timeout of a minute) or in a test.
 * @throws Error with the server's last log lines when it does not accept connections in a minute.
 */
export function rabbitmqUrl(): Promise<string> {
  ready ??= (async () => {
    const url = inject('rabbitmqUrl');
    const logFile = inject('rabbitmqLogFile');
    await waitFor(`RabbitMQ at ${url} to accept an AMQP connection`, () => amqpAnswers(url), {
      timeoutMs: READY_TIMEOUT_MS,
      explain: () => (logFile === '' ? 'RABBITMQ_URL is set: is that server running?' : tail(logFile)),
    });
    return url;
  })();
  return ready;
}

/** A prefix for exchange and queue names no other test file uses: `harrier-test-<random>.`. */
export function freshRabbitPrefix(): string {
  return `harrier-test-${randomBytes(6).toString('hex')}.`;
}

/** A prefix a RabbitMqBroker takes (no '.') that no other test uses: {@link freshRabbitPrefix} without its '.'. */
export function freshBrokerPrefix(): string {
  return freshRabbitPrefix().slice(0, -1);
}
