import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InMemoryBroker } from '../../../src/broker/in-memory-broker.js';
import type { Delivery, ErrorInfo, SubscriptionSpec } from '../../../src/broker/message-broker.js';
import { ManualClock } from '../../../src/clock/manual-clock.js';
import { buildDeadLetterRecord } from '../../../src/dead-letters/dead-letter-record.js';
import type { DeadLetterRecord, ReplayRecord } from '../../../src/dead-letters/dead-letter-store.js';
import { InMemoryDeadLetterStore } from '../../../src/dead-letters/in-memory-dead-letter-store.js';
import { replayDeadLetters } from '../../../src/dead-letters/replay-dead-letters.js';
import { encodeEnvelope } from '../../../src/messages/codec.js';
import type { MessageKind } from '../../../src/messages/definition.js';
import { uuidv7 } from '../../../src/messages/uuid-v7.js';

const ENDPOINT = 'billing';
const HANDLER = 'SendInvoice';
const OTHER_HANDLER = 'NotifyCustomer';
const EVENT = 'orders.OrderPlaced';
const COMMAND = 'billing.ChargeCard';
const error: ErrorInfo = { name: 'Error', message: 'card declined' };

const subscriptions: readonly SubscriptionSpec[] = [
  { handler: HANDLER, kind: 'event', types: [EVENT] },
  { handler: OTHER_HANDLER, kind: 'event', types: [EVENT] },
  { handler: 'ChargeCardHandler', kind: 'command', types: [COMMAND] },
];

/** Takes the next delivery of `endpoint`, waiting for one without sleeping. */
async function receiveOne(broker: InMemoryBroker, endpoint = ENDPOINT): Promise<Delivery> {
  const controller = new AbortController();
  for await (const delivery of broker.receiver({ endpoint, signal: controller.signal })) {
    controller.abort();
    return delivery;
  }
  throw new Error(`the receiver of "${endpoint}" ended without a delivery`);
}

describe('replayDeadLetters', () => {
  let clock: ManualClock;
  let broker: InMemoryBroker;
  let store: InMemoryDeadLetterStore;

  beforeEach(async () => {
    clock = new ManualClock();
    broker = new InMemoryBroker({ clock });
    store = new InMemoryDeadLetterStore();
    await broker.register(ENDPOINT, subscriptions);
  });

  afterEach(async () => {
    await broker.close();
    await store.close();
  });

  function encoded(kind: MessageKind, type: string, id: string): string {
    return encodeEnvelope({
      v: 1,
      id,
      kind,
      type,
      payload: { orderId: 'o-1' },
      meta: {
        correlationId: id,
        occurredAt: new Date(clock.now()).toISOString(),
        partitionKey: 'o-1',
        headers: {},
      },
    });
  }

  /**
   * Publishes a message, fails it twice in the `HANDLER` subscription (acking the other copy), and
   * stores its dead letter, as a dispatcher would.
   */
  async function deadLetterOf(kind: 'event' | 'command' = 'event'): Promise<DeadLetterRecord> {
    const id = uuidv7(clock.now());
    const type = kind === 'event' ? EVENT : COMMAND;
    await broker.publish({
      id,
      kind,
      type,
      body: encoded(kind, type, id),
      partitionKey: 'o-1',
      ordered: true,
    });
    for (;;) {
      const delivery = await receiveOne(broker);
      if (delivery.facts.handler === OTHER_HANDLER) {
        await broker.ack(delivery.id);
        continue;
      }
      if (delivery.facts.attempt < 2) {
        await broker.nack(delivery.id, { retryAt: clock.now(), error });
        continue;
      }
      await broker.nack(delivery.id, { deadLetter: 'handler-failed', error });
      return store.add(
        buildDeadLetterRecord({
          body: delivery.body,
          facts: delivery.facts,
          handler: delivery.facts.handler ?? 'ChargeCardHandler',
          reason: 'handler-failed',
          error,
          ordered: true,
          now: clock.now(),
        }),
      );
    }
  }

  /** A dead letter of bytes that never decoded: no message id, kind or type. */
  async function badInputDeadLetter(): Promise<DeadLetterRecord> {
    return store.add(
      buildDeadLetterRecord({
        body: '{not json',
        facts: {
          messageId: undefined,
          kind: undefined,
          type: undefined,
          endpoint: ENDPOINT,
          handler: undefined,
          attempt: 1,
          history: [],
          partitionKey: undefined,
        },
        handler: undefined,
        reason: 'malformed',
        error: { name: 'SyntaxError', message: 'Unexpected token n in JSON' },
        ordered: false,
        now: clock.now(),
      }),
    );
  }

  function expectNothingRedelivered(): void {
    expect(broker.stats()).toEqual({ ready: 0, waiting: 0, inFlight: 0, unconsumed: 0 });
  }

  describe('when the record is dead', () => {
    it('redelivers the same message to the same subscription with fresh attempts', async () => {
      const record = await deadLetterOf();
      expect(record.attemptCount).toBe(2);
      await replayDeadLetters({ store, broker, ids: [record.id], clock });
      const delivery = await receiveOne(broker);
      expect(delivery.body).toBe(record.envelope);
      expect(delivery.facts).toMatchObject({
        messageId: record.messageId,
        kind: 'event',
        type: EVENT,
        endpoint: ENDPOINT,
        handler: HANDLER,
        attempt: 1,
        history: [],
        partitionKey: 'o-1',
      });
    });

    it('names the dead letter in the delivery, so its outcome can be recorded', async () => {
      const record = await deadLetterOf();
      await replayDeadLetters({ store, broker, ids: [record.id], clock });
      expect((await receiveOne(broker)).facts.replayOf).toBe(record.id);
    });

    it('delivers only to the subscription the message died in', async () => {
      const record = await deadLetterOf();
      await replayDeadLetters({ store, broker, ids: [record.id], clock });
      expect(broker.stats().ready).toBe(1);
      expect((await receiveOne(broker)).facts.handler).toBe(HANDLER);
      expect(broker.stats().ready).toBe(0);
    });

    it('marks the record replayed with when and by whom, and reports ok', async () => {
      const record = await deadLetterOf();
      clock.advance(5000);
      const results = await replayDeadLetters({ store, broker, ids: [record.id], by: 'alice', clock });
      expect(results).toEqual([{ id: record.id, ok: true }]);
      const stored = await store.get(record.id);
      expect(stored?.status).toBe('replayed');
      expect(stored?.replays).toEqual([{ at: clock.now(), by: 'alice' } satisfies ReplayRecord]);
    });

    it('records no `by` when none is given', async () => {
      const record = await deadLetterOf();
      await replayDeadLetters({ store, broker, ids: [record.id], clock });
      const [replay] = (await store.get(record.id))?.replays ?? [];
      expect(replay).toEqual({ at: clock.now() });
      expect(replay !== undefined && 'by' in replay).toBe(false);
    });
  });

  describe('when the record is a command', () => {
    it('redelivers it to its command queue with fresh attempts', async () => {
      const record = await deadLetterOf('command');
      const results = await replayDeadLetters({ store, broker, ids: [record.id], clock });
      expect(results).toEqual([{ id: record.id, ok: true }]);
      const delivery = await receiveOne(broker);
      expect(delivery.facts).toMatchObject({
        messageId: record.messageId,
        type: COMMAND,
        attempt: 1,
        history: [],
      });
    });
  });

  describe('when one id is missing', () => {
    it('reports not-found for it and still replays the others', async () => {
      const record = await deadLetterOf();
      const missing = '0123456789abcdef0123456789abcdef';
      const results = await replayDeadLetters({ store, broker, ids: [missing, record.id], clock });
      expect(results).toEqual([
        { id: missing, ok: false, error: 'not-found', message: expect.stringContaining(missing) as unknown },
        { id: record.id, ok: true },
      ]);
      expect((await receiveOne(broker)).facts.messageId).toBe(record.messageId);
      expect((await store.get(record.id))?.status).toBe('replayed');
    });
  });

  describe('when the record was already replayed', () => {
    it('reports already-replayed and redelivers nothing', async () => {
      const record = await deadLetterOf();
      await replayDeadLetters({ store, broker, ids: [record.id], clock });
      await broker.ack((await receiveOne(broker)).id);
      const results = await replayDeadLetters({ store, broker, ids: [record.id], clock });
      expect(results).toMatchObject([{ id: record.id, ok: false, error: 'already-replayed' }]);
      expectNothingRedelivered();
      expect((await store.get(record.id))?.replays).toHaveLength(1);
    });
  });

  describe('when the record is bad input without a message id', () => {
    it('reports not-replayable, says why, and leaves the record dead', async () => {
      const record = await badInputDeadLetter();
      const results = await replayDeadLetters({ store, broker, ids: [record.id], clock });
      expect(results).toEqual([
        {
          id: record.id,
          ok: false,
          error: 'not-replayable',
          message: expect.stringContaining('no message id') as unknown,
        },
      ]);
      expectNothingRedelivered();
      expect((await store.get(record.id))?.status).toBe('dead');
    });
  });

  describe('when the record is an event without a subscription', () => {
    it('reports not-replayable and redelivers nothing', async () => {
      const record = await store.add({
        ...(await deadLetterOf()),
        id: 'no-handler-record',
        handler: undefined,
      });
      const results = await replayDeadLetters({ store, broker, ids: [record.id], clock });
      expect(results).toMatchObject([{ id: record.id, ok: false, error: 'not-replayable' }]);
      expectNothingRedelivered();
    });
  });

  describe('when dryRun is set', () => {
    it('reports what would be replayed without redelivering or marking anything', async () => {
      const record = await deadLetterOf();
      const before = await store.get(record.id);
      const results = await replayDeadLetters({ store, broker, ids: [record.id], clock, dryRun: true });
      expect(results).toEqual([{ id: record.id, ok: true, dryRun: true }]);
      expectNothingRedelivered();
      expect(await store.get(record.id)).toEqual(before);
    });

    it('still reports the records that would fail', async () => {
      const record = await badInputDeadLetter();
      const results = await replayDeadLetters({
        store,
        broker,
        ids: ['missing', record.id],
        clock,
        dryRun: true,
      });
      expect(results).toMatchObject([
        { id: 'missing', ok: false, error: 'not-found' },
        { id: record.id, ok: false, error: 'not-replayable' },
      ]);
    });
  });

  describe('when verify refuses a record', () => {
    it('reports its reason, redelivers nothing and leaves the record dead', async () => {
      const record = await deadLetterOf();
      const seen: DeadLetterRecord[] = [];
      const results = await replayDeadLetters({
        store,
        broker,
        ids: [record.id],
        clock,
        verify: (candidate) => {
          seen.push(candidate);
          return 'signature-invalid';
        },
      });
      expect(seen).toEqual([record]);
      expect(results).toEqual([
        {
          id: record.id,
          ok: false,
          error: 'signature-invalid',
          message: expect.stringContaining('signature-invalid') as unknown,
        },
      ]);
      expectNothingRedelivered();
      expect((await store.get(record.id))?.status).toBe('dead');
    });

    it('reports the code and message of a refusal object', async () => {
      const record = await deadLetterOf();
      const results = await replayDeadLetters({
        store,
        broker,
        ids: [record.id],
        clock,
        verify: () => ({ code: 'signature-invalid', message: 'add the retired key back' }),
      });
      expect(results).toEqual([
        {
          id: record.id,
          ok: false,
          error: 'signature-invalid',
          message: expect.stringContaining('add the retired key back') as unknown,
        },
      ]);
      expectNothingRedelivered();
    });

    it('reports verify-failed when verify throws, and still replays the others', async () => {
      const [bad, good] = [await deadLetterOf(), await deadLetterOf()];
      const results = await replayDeadLetters({
        store,
        broker,
        ids: [bad.id, good.id],
        clock,
        verify: (candidate) => {
          if (candidate.id === bad.id) throw new Error('key not found');
          return undefined;
        },
      });
      expect(results).toEqual([
        {
          id: bad.id,
          ok: false,
          error: 'verify-failed',
          message: expect.stringContaining('key not found') as unknown,
        },
        { id: good.id, ok: true },
      ]);
      expect((await receiveOne(broker)).facts.messageId).toBe(good.messageId);
    });
  });

  describe('when the broker throws', () => {
    it('reports redeliver-failed with the error message and leaves the record dead', async () => {
      const record = await deadLetterOf();
      await broker.close();
      const results = await replayDeadLetters({ store, broker, ids: [record.id], clock });
      expect(results).toEqual([
        {
          id: record.id,
          ok: false,
          error: 'redeliver-failed',
          message: expect.stringContaining('closed') as unknown,
        },
      ]);
      expect((await store.get(record.id))?.status).toBe('dead');
    });
  });

  describe('when the message dies again before replay returns', () => {
    it('leaves the record dead, not replayed', async () => {
      const record = await deadLetterOf();
      // A consumer as fast as can be: the message fails again inside redeliver.
      const fast = new (class extends InMemoryBroker {
        override async redeliver(target: Parameters<InMemoryBroker['redeliver']>[0]): Promise<void> {
          await super.redeliver(target);
          await store.add({ ...record, reason: 'signature-invalid', lastFailedAt: record.lastFailedAt + 1 });
        }
      })({ clock });
      const results = await replayDeadLetters({ store, broker: fast, ids: [record.id], clock, by: 'ops' });
      expect(results).toEqual([{ id: record.id, ok: true }]);
      expect(await store.get(record.id)).toMatchObject({
        status: 'dead',
        reason: 'signature-invalid',
        replays: [{ by: 'ops' }],
      });
      await fast.close();
    });
  });

  describe('when the record cannot be marked replayed', () => {
    it('reports mark-failed and says the message was redelivered', async () => {
      const record = await deadLetterOf();
      const failing = new (class extends InMemoryDeadLetterStore {
        override markReplayed(): Promise<boolean> {
          return Promise.reject(new Error('disk full'));
        }
      })();
      await failing.add(record);
      const results = await replayDeadLetters({ store: failing, broker, ids: [record.id], clock });
      expect(results).toEqual([
        {
          id: record.id,
          ok: false,
          error: 'mark-failed',
          message: expect.stringMatching(/redelivered.*disk full/) as unknown,
        },
      ]);
      expect((await receiveOne(broker)).facts.messageId).toBe(record.messageId);
      await failing.close();
    });
  });
});
