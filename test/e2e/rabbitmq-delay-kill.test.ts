/**
 * Delayed messages when the node or the queue they expire into fails at that moment (DESIGN.md
 * guarantee 1): quorum delay queues dead-letter at least once, so an expired message stays in its
 * delay queue until the queue it goes to has confirmed it.
 *
 * - A queue that cannot take the message when it expires (its Raft member stopped, as a queue whose
 *   node is down or cut off in a cluster): the quorum delay queue sends it again once the queue is
 *   back (RabbitMQ's resend timeout set to 1 s here). A classic delay queue (at most once) loses it:
 *   this test fails with `queueType: 'classic'` delay queues.
 * - The node SIGKILLed halfway through the expiry of 600 messages of one delay queue, then started
 *   again: every message arrives. (A single node's kill loses nothing with classic delay queues
 *   either: what a killed process wrote survives it.)
 *
 * The queues are declared before a graceful restart: RabbitMQ 3.10 saves a new quorum queue's
 * registration lazily, and one killed moments after its declaration comes back broken
 * (docs/testing.md).
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logging/logger.js';
import type { OutgoingMessage } from '../../src/broker/message-broker.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RabbitMqBroker, type RabbitMqQueueType } from '../../src/rabbitmq/index.js';
import { rabbitmqServerPath, startRabbitMqServer, type LocalRabbitMq } from '../helpers/local-rabbitmq.js';
import { freshBrokerPrefix } from '../helpers/rabbitmq.js';

const ENDPOINT = 'delays';
const TYPE = 'delays.Wake';
const MESSAGES = 600;
/** Into the delay queue of 2048 ms, and out of it with 52 ms to spare before their time. */
const DELAY_MS = 2_100;
const BUCKET_MS = 2_048;

let server: LocalRabbitMq;
/** The broker of the SIGKILL test, its queues declared before the server's graceful restart. */
let sigkillBroker: RabbitMqBroker | undefined;

beforeAll(async () => {
  server = await startRabbitMqServer('harrier-rmq-delay-kill-');
  const broker = new RabbitMqBroker({
    connection: server.url,
    prefix: freshBrokerPrefix(),
    logger: silentLogger,
    publishTimeoutMs: 30_000,
  });
  sigkillBroker = broker;
  await broker.register(ENDPOINT, [{ handler: 'wake', kind: 'command', types: [TYPE] }]);
  // Declares the delay queue of 2048 ms; the graceful restart below saves it (and the command queue).
  await broker.publish(wake(Date.now() + DELAY_MS));
  // A dead-lettered message not confirmed is sent again after 1 s instead of RabbitMQ's minutes.
  writeFileSync(
    join(server.dir, 'advanced.config'),
    '[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 1000}]}].\n',
  );
  await server.restart();
}, 90_000);

/** Runs an Erlang expression on the test's RabbitMQ node (`rabbitmqctl eval`); returns its output. */
function evalOnNode(expression: string): string {
  const serverPath = rabbitmqServerPath();
  if (serverPath === undefined) throw new Error('rabbitmq-server not found');
  const ctl = join(dirname(serverPath), 'rabbitmqctl');
  const run = spawnSync(ctl, ['-n', server.nodeName, 'eval', expression], {
    env: { ...process.env, ...server.env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (run.status !== 0) throw new Error(`rabbitmqctl eval failed: ${run.stdout}${run.stderr}`);
  return run.stdout.trim();
}

/**
 * Stops (or starts again) the Raft member of quorum queue `queue` on the node: the queue can take
 * nothing meanwhile, as a queue whose node is down or cut off in a cluster.
 */
function raMember(queue: string, action: 'stop_server' | 'restart_server'): void {
  const member = `{'%2F_${queue}', node()}`;
  const out = evalOnNode(`ra:${action}(quorum_queues, ${member}).`);
  if (out !== 'ok') throw new Error(`ra:${action} of ${queue} answered ${out}`);
}

afterAll(async () => {
  await sigkillBroker?.close();
  await server.dispose();
}, 30_000);

function wake(deliverAt: number): OutgoingMessage {
  return { id: uuidv7(), kind: 'command', type: TYPE, body: '{}', deliverAt };
}

/** Publishes {@link MESSAGES} delayed commands 32 at a time; resolves with their ids and when the first and last went out. */
async function publishDelayed(
  broker: RabbitMqBroker,
): Promise<{ ids: string[]; firstAt: number; lastAt: number }> {
  const ids: string[] = [];
  const firstAt = Date.now();
  let lastAt = firstAt;
  for (let i = 0; i < MESSAGES; i += 32) {
    const batch = Array.from({ length: Math.min(32, MESSAGES - i) }, () => wake(Date.now() + DELAY_MS));
    await Promise.all(batch.map((message) => broker.publish(message)));
    ids.push(...batch.map((message) => message.id));
    lastAt = Date.now();
  }
  return { ids, firstAt, lastAt };
}

/** The message ids the endpoint receives (and acks) until every one of `ids` came or `timeoutMs` passed. */
async function receiveAll(
  broker: RabbitMqBroker,
  ids: readonly string[],
  timeoutMs: number,
): Promise<Set<string>> {
  const wanted = new Set(ids);
  const seen = new Set<string>();
  const controller = new AbortController();
  const timer = setTimeout(() => {
    controller.abort();
  }, timeoutMs);
  try {
    for await (const delivery of broker.receiver({
      endpoint: ENDPOINT,
      signal: controller.signal,
      prefetch: 64,
    })) {
      if (delivery.facts.messageId !== undefined) seen.add(delivery.facts.messageId);
      await broker.ack(delivery.id);
      if ([...wanted].every((id) => seen.has(id))) break;
    }
  } finally {
    clearTimeout(timer);
  }
  return seen;
}

async function killWhileExpiring(broker: RabbitMqBroker): Promise<{ missing: number; lateMs: number }> {
  const { ids, firstAt, lastAt } = await publishDelayed(broker);
  // Halfway through their expiry: some are out of the delay queue, some moving, some still in.
  const killAt = firstAt + BUCKET_MS + (lastAt - firstAt) / 2;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, killAt - Date.now())));
  const lateMs = Date.now() - killAt;
  await server.kill();
  await server.restart();
  const seen = await receiveAll(broker, ids, 15_000);
  return { missing: ids.filter((id) => !seen.has(id)).length, lateMs };
}

/**
 * Publishes one command delayed 1.1 s (the delay queue of 1024 ms) through a broker whose delay
 * queues are of `delayQueueType` while the command's quorum queue has its Raft member stopped,
 * starts the member again 1.5 s after the message's time, and tells whether the message then
 * arrives within 8 s.
 */
async function expireIntoStoppedQueue(delayQueueType: RabbitMqQueueType): Promise<boolean> {
  const prefix = freshBrokerPrefix();
  const receiving = new RabbitMqBroker({ connection: server.url, prefix, logger: silentLogger });
  // Only publishes (it registers nothing): its delay queues are of the type under test.
  const publishing = new RabbitMqBroker({
    connection: server.url,
    prefix,
    queueType: delayQueueType,
    logger: silentLogger,
  });
  try {
    await receiving.register(ENDPOINT, [{ handler: 'wake', kind: 'command', types: [TYPE] }]);
    const target = `${prefix}.cmd.${TYPE}`;
    raMember(target, 'stop_server');
    const message = wake(Date.now() + 1_100);
    await publishing.publish(message);
    await new Promise((resolve) => setTimeout(resolve, 1_100 + 1_500));
    raMember(target, 'restart_server');
    const seen = await receiveAll(receiving, [message.id], 8_000);
    return seen.has(message.id);
  } finally {
    await Promise.all([receiving.close(), publishing.close()]);
  }
}

describe('RabbitMqBroker delay queues', () => {
  describe('when the queue a delayed message expires into cannot take it', () => {
    it('keeps the message in its quorum delay queue and delivers it once the queue is back', async () => {
      expect(await expireIntoStoppedQueue('quorum')).toBe(true);
    }, 30_000);
  });

  describe('when RabbitMQ is killed with SIGKILL while delayed messages expire', () => {
    it('delivers every one of them once RabbitMQ is back (quorum delay queues dead-letter at least once)', async () => {
      const { missing, lateMs } = await killWhileExpiring(
        sigkillBroker ?? expect.fail('the broker of the SIGKILL test was not made: see the beforeAll error'),
      );
      console.info(
        `[rabbitmq-delay-kill] killed ${lateMs} ms after the planned moment; ${missing} of ${MESSAGES} missing`,
      );
      expect(missing).toBe(0);
    }, 60_000);
  });
});
