/**
 * RabbitMQ's consumer timeout against a server of the test's own, started with
 * `consumer_timeout` 3 s and `channel_tick_interval` 500 ms (a channel checks the timeout on each
 * tick, every 60 s by default): a delivery unacknowledged longer than that makes the server close
 * the channel, and what it held comes back with a raised `x-delivery-count`.
 *
 * - An ordered retry held past the timeout: the receiver gives its lane back to the tail of the
 *   partition queue before the server would close the channel (`holdLimitMs`), so the retry comes
 *   at its time, to the same process, with its failed attempt and no unsettled end, and the next
 *   message of its key after it. On the old code the channel closed, the partition went to the
 *   other process waiting on it, which took the retry early as a crash.
 * - A handler that runs past the timeout cannot be renewed: the receiver says so (naming
 *   consumer_timeout) and counts that delivery's return as an unsettled end, as a lock lost on
 *   Redis counts; the other deliveries the channel held come back as after an outage.
 * - An ordered message retried at once after a long run: the retry goes out on a fresh delivery
 *   (its lane moved to the tail), not on the first one's, so its run has the whole budget. On the
 *   old code RabbitMQ closed the channel during the second run.
 * - A delivery ledger that cannot be reached for longer than the timeout: the lane's waiting head
 *   is given back to the tail meanwhile. On the old code it stayed pinned (being admitted) and
 *   RabbitMQ closed the channel over it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AdmitVerdict, LedgerCopy } from '../../src/broker/delivery-ledger.js';
import { InMemoryDeliveryLedger } from '../../src/broker/in-memory-delivery-ledger.js';
import type { Delivery } from '../../src/broker/message-broker.js';
import type { Logger } from '../../src/logging/logger.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RabbitMqBroker, type RabbitMqBrokerOptions } from '../../src/rabbitmq/rabbitmq-broker.js';
import { startRabbitMqServer, type LocalRabbitMq } from '../helpers/local-rabbitmq.js';
import { waitFor } from '../helpers/local-redis.js';
import { entry, POST } from '../helpers/rabbitmq-lanes.js';

const CONSUMER_TIMEOUT_MS = 3_000;
let server: LocalRabbitMq | undefined;
const brokers: RabbitMqBroker[] = [];
let made = 0;

beforeAll(async () => {
  server = await startRabbitMqServer('harrier-rmq-consumer-timeout-', {
    rabbit: { consumer_timeout: CONSUMER_TIMEOUT_MS, channel_tick_interval: 500 },
  });
}, 60_000);

afterAll(async () => {
  await Promise.all(brokers.map((broker) => broker.close()));
  await server?.dispose();
});

/** The URL of the test's own server. */
function serverUrl(): string {
  if (server === undefined) throw new Error('the RabbitMQ server did not start');
  return server.url;
}

/** A logger keeping the warnings. */
function recording(warnings: string[]): Logger {
  return {
    debug: () => undefined,
    info: () => undefined,
    warn: (message) => warnings.push(message),
    error: (message) => warnings.push(message),
  };
}

function brokerOn(prefix: string, warnings: string[], options: Partial<RabbitMqBrokerOptions> = {}) {
  const broker = new RabbitMqBroker({
    connection: serverUrl(),
    prefix,
    partitions: 1,
    logger: recording(warnings),
    ...options,
  });
  brokers.push(broker);
  return broker;
}

interface Seen {
  readonly by: string;
  readonly body: string;
  readonly attempt: number;
  readonly unsettledEnds: number;
  readonly failures: number;
  readonly at: number;
}

/** Receives on `broker` until stopped, recording each delivery and settling it with `settle`. */
function work(
  name: string,
  broker: RabbitMqBroker,
  seen: Seen[],
  settle: (delivery: Delivery) => Promise<void>,
  signal: AbortSignal,
): Promise<void> {
  return (async () => {
    for await (const delivery of broker.receiver({ endpoint: 'accounts', prefetch: 2, signal })) {
      seen.push({
        by: name,
        body: delivery.body,
        attempt: delivery.facts.attempt,
        unsettledEnds: delivery.facts.unsettledEnds ?? 0,
        failures: delivery.facts.history.length,
        at: Date.now(),
      });
      await settle(delivery);
    }
  })();
}

const consumerTimeoutWarning = (warnings: readonly string[]) =>
  warnings.filter((warning) => warning.includes('consumer_timeout'));

describe('RabbitMqBroker and RabbitMQ consumer_timeout', () => {
  describe('when an ordered retry waits longer than consumer_timeout, with another process waiting on its partition', () => {
    it('keeps it in the same process: at its time, with its failed attempt, no unsettled end, and its key in order', async () => {
      const warnings: string[] = [];
      const prefix = `ct-${String(++made)}-${uuidv7().slice(-8)}`;
      // A window of 2: a3 and b1 wait in the queue behind a1 and a2, so a3 arrives while a1 and
      // a2 are on their way to the tail, and goes there behind them.
      const options = { holdLimitMs: 1_000, partitionPrefetch: 2 };
      const first = brokerOn(prefix, warnings, options);
      const second = brokerOn(prefix, warnings, options);
      for (const broker of [first, second]) {
        await broker.register('accounts', [
          { handler: 'commands', kind: 'command', types: [POST], orderedTypes: [POST] },
        ]);
      }
      const seen: Seen[] = [];
      const stop = new AbortController();
      let retryAt = 0;
      const settle = (broker: RabbitMqBroker) => async (delivery: Delivery) => {
        if (delivery.body === 'a1' && delivery.facts.attempt === 1) {
          retryAt = Date.now() + 2 * CONSUMER_TIMEOUT_MS;
          await broker.nack(delivery.id, { retryAt, error: { name: 'Error', message: 'later' } });
        } else {
          await broker.ack(delivery.id);
        }
      };
      const working = [work('first', first, seen, settle(first), stop.signal)];
      try {
        // The first process takes the partition, then the second one waits on it.
        await first.publish(entry('account-z', 'z1'));
        await waitFor('the first process to take the partition', () => seen.length === 1, {
          timeoutMs: 10_000,
        });
        working.push(work('second', second, seen, settle(second), stop.signal));
        for (const body of ['a1', 'a2']) await first.publish(entry('account-a', body));
        await first.publish(entry('account-b', 'b1'));
        await first.publish(entry('account-a', 'a3'));
        await waitFor('a3 to be handled', () => seen.some((s) => s.body === 'a3'), {
          timeoutMs: 20_000,
          explain: () => JSON.stringify(seen),
        });
        // Every copy of the key came back: the next message of the key goes as usual.
        await first.publish(entry('account-a', 'a4'));
        await waitFor('a4 to be handled', () => seen.some((s) => s.body === 'a4'), {
          timeoutMs: 5_000,
          explain: () => JSON.stringify(seen),
        });

        const of = (body: string) => seen.filter((s) => s.body === body);
        expect(
          of('a1').map(({ by, attempt, unsettledEnds, failures }) => ({
            by,
            attempt,
            unsettledEnds,
            failures,
          })),
        ).toEqual([
          { by: 'first', attempt: 1, unsettledEnds: 0, failures: 0 },
          { by: 'first', attempt: 2, unsettledEnds: 0, failures: 1 },
        ]);
        expect(of('a1')[1]?.at).toBeGreaterThanOrEqual(retryAt);
        expect(of('a2')).toMatchObject([{ by: 'first', attempt: 1, unsettledEnds: 0 }]);
        expect(of('a2')[0]?.at).toBeGreaterThanOrEqual(of('a1')[1]?.at ?? Infinity);
        expect(of('a3')).toMatchObject([{ by: 'first', attempt: 1, unsettledEnds: 0 }]);
        expect(of('a3')[0]?.at).toBeGreaterThanOrEqual(of('a2')[0]?.at ?? Infinity);
        expect(of('a4')).toMatchObject([{ by: 'first', attempt: 1, unsettledEnds: 0 }]);
        expect(of('b1')).toMatchObject([{ by: 'first', attempt: 1 }]);
        expect(of('b1')[0]?.at).toBeLessThan(retryAt);
        expect(consumerTimeoutWarning(warnings)).toEqual([]);
      } finally {
        stop.abort();
        await Promise.all(working);
      }
    }, 40_000);
  });

  describe('when a handler runs longer than consumer_timeout', () => {
    it("warns naming consumer_timeout, counts that delivery as an unsettled end, and the channel's other one as an outage", async () => {
      const warnings: string[] = [];
      const broker = brokerOn(`ct-${String(++made)}-${uuidv7().slice(-8)}`, warnings);
      await broker.register('accounts', [{ handler: 'commands', kind: 'command', types: [POST] }]);
      const stop = new AbortController();
      const deliveries = broker.receiver({ endpoint: 'accounts', prefetch: 2, signal: stop.signal });
      const iterator = deliveries[Symbol.asyncIterator]();
      const next = async (): Promise<Delivery> => {
        const result = await iterator.next();
        if (result.done === true) throw new Error('the receiver ended');
        return result.value;
      };
      try {
        await broker.publish({ id: uuidv7(), kind: 'command', type: POST, body: 'slow' });
        const slow = await next();
        expect(slow.facts.attempt).toBe(1);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        await broker.publish({ id: uuidv7(), kind: 'command', type: POST, body: 'other' });
        const other = await next();
        expect(other.body).toBe('other');
        // Both handlers run on; the server closes the channel over the slow one; both come back.
        const back = [await next(), await next()].sort((a, b) => a.body.localeCompare(b.body));
        expect(consumerTimeoutWarning(warnings)).toHaveLength(1);
        expect(
          back.map((delivery) => [delivery.body, delivery.facts.attempt, delivery.facts.unsettledEnds]),
        ).toEqual([
          ['other', 1, 0],
          ['slow', 2, 1],
        ]);
        await expect(broker.ack(slow.id)).rejects.toThrow();
        await expect(broker.ack(other.id)).rejects.toThrow();
        for (const delivery of back) await broker.ack(delivery.id);
      } finally {
        stop.abort();
      }
    }, 20_000);
  });
  describe('when an ordered message is retried at once after its handler ran most of consumer_timeout', () => {
    it('hands the retry out on a fresh delivery, so its handler has the whole budget again', async () => {
      const warnings: string[] = [];
      const broker = brokerOn(`ct-${String(++made)}-${uuidv7().slice(-8)}`, warnings, { holdLimitMs: 1_000 });
      await broker.register('accounts', [
        { handler: 'commands', kind: 'command', types: [POST], orderedTypes: [POST] },
      ]);
      const seen: Seen[] = [];
      const stop = new AbortController();
      // Each run takes most of the 3 s: on the old code the retry went out on the delivery of the
      // first run, and RabbitMQ closed the channel during the second.
      const settle = async (delivery: Delivery) => {
        await new Promise((resolve) => setTimeout(resolve, 2_000));
        if (delivery.facts.attempt === 1) {
          await broker.nack(delivery.id, { retryAt: Date.now(), error: { name: 'Error', message: 'again' } });
        } else {
          await broker.ack(delivery.id);
        }
      };
      const working = work('only', broker, seen, settle, stop.signal);
      try {
        await broker.publish(entry('account-a', 'a1'));
        await waitFor('the retry to be handled', () => seen.length >= 2, {
          timeoutMs: 10_000,
          explain: () => JSON.stringify(seen),
        });
        // Past the second run's end: a consumer timeout would have fired by now.
        await new Promise((resolve) => setTimeout(resolve, 2_500));
        expect(seen.map(({ attempt, unsettledEnds }) => [attempt, unsettledEnds])).toEqual([
          [1, 0],
          [2, 0],
        ]);
        expect(consumerTimeoutWarning(warnings)).toEqual([]);
      } finally {
        stop.abort();
        await working;
      }
    }, 20_000);
  });
  describe('when the delivery ledger cannot be reached for longer than consumer_timeout', () => {
    it('keeps giving the waiting ordered message back, so the channel is not closed over it', async () => {
      const warnings: string[] = [];
      /** A ledger whose admissions fail while it is down (as an unreachable store's do). */
      class DownLedger extends InMemoryDeliveryLedger {
        down = false;
        override admit(copy: LedgerCopy, windowMs: number): Promise<AdmitVerdict> {
          if (this.down) return Promise.reject(new Error('the ledger is down'));
          return super.admit(copy, windowMs);
        }
      }
      const ledger = new DownLedger();
      const broker = brokerOn(`ct-${String(++made)}-${uuidv7().slice(-8)}`, warnings, {
        holdLimitMs: 1_000,
        ledger,
      });
      await broker.register('accounts', [
        { handler: 'commands', kind: 'command', types: [POST], orderedTypes: [POST] },
      ]);
      const seen: Seen[] = [];
      const stop = new AbortController();
      await broker.publish(entry('account-a', 'a1'));
      ledger.down = true;
      const working = work('only', broker, seen, (delivery) => broker.ack(delivery.id), stop.signal);
      try {
        // Longer than consumer_timeout (3 s, checked every 500 ms) with the ledger down.
        await new Promise((resolve) => setTimeout(resolve, 4_500));
        expect(seen).toEqual([]);
        ledger.down = false;
        await waitFor('a1 to be handled', () => seen.length >= 1, { timeoutMs: 5_000 });
        expect(seen.map(({ body, attempt, unsettledEnds }) => [body, attempt, unsettledEnds])).toEqual([
          ['a1', 1, 0],
        ]);
        expect(consumerTimeoutWarning(warnings)).toEqual([]);
      } finally {
        stop.abort();
        await working;
      }
    }, 20_000);
  });
});
