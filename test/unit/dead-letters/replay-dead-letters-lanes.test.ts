import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InMemoryBroker } from '../../../src/broker/in-memory-broker.js';
import type { RedeliveryTarget } from '../../../src/broker/message-broker.js';
import { createBus } from '../../../src/bus/message-bus.js';
import { ManualClock } from '../../../src/clock/manual-clock.js';
import { buildDeadLetterRecord } from '../../../src/dead-letters/dead-letter-record.js';
import type { DeadLetterRecord } from '../../../src/dead-letters/dead-letter-store.js';
import { InMemoryDeadLetterStore } from '../../../src/dead-letters/in-memory-dead-letter-store.js';
import {
  replayDeadLetters,
  summarizeReplay,
  type ReplayResult,
} from '../../../src/dead-letters/replay-dead-letters.js';
import { HarrierError } from '../../../src/errors/harrier-error.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { encodeEnvelope } from '../../../src/messages/codec.js';
import type { Envelope } from '../../../src/messages/envelope.js';
import { createEnvelopeSigner } from '../../../src/messages/signing.js';

const ENDPOINT = 'billing';
const COMMAND = 'billing.ChargeCard';
const KEY = 'a3f1c2d4e5b60718293a4b5c6d7e8f90112233445566778899aabbccddeeff00';

/** Lets every promise continuation that is ready run (no time passes on a manual clock). */
const settled = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * A broker that records the messages sent back, in the order `redeliver` was called, and how many
 * redeliveries (in all and per partition key) were under way at once; each takes a few turns of the
 * event loop so parallel ones overlap.
 */
class RecordingBroker extends InMemoryBroker {
  readonly sent: string[] = [];
  maxInFlight = 0;
  readonly maxInFlightPerKey = new Map<string, number>();
  #inFlight = 0;
  readonly #inFlightPerKey = new Map<string, number>();

  override async redeliver(target: RedeliveryTarget): Promise<void> {
    const key = target.message.partitionKey ?? '';
    this.sent.push(target.message.id);
    this.#inFlight++;
    this.#inFlightPerKey.set(key, (this.#inFlightPerKey.get(key) ?? 0) + 1);
    this.maxInFlight = Math.max(this.maxInFlight, this.#inFlight);
    this.maxInFlightPerKey.set(
      key,
      Math.max(this.maxInFlightPerKey.get(key) ?? 0, this.#inFlightPerKey.get(key) ?? 0),
    );
    await settled();
    await settled();
    this.#inFlight--;
    this.#inFlightPerKey.set(key, (this.#inFlightPerKey.get(key) ?? 0) - 1);
  }
}

/** The envelope of command `id`, signed when a signer is given. */
function envelopeOf(id: string, partitionKey: string, sign?: (envelope: Envelope) => string): string {
  const envelope: Envelope = {
    v: 1,
    id,
    kind: 'command',
    type: COMMAND,
    payload: { n: id },
    meta: { correlationId: id, occurredAt: '2026-01-01T00:00:00.000Z', partitionKey, headers: {} },
  };
  return sign === undefined ? encodeEnvelope(envelope) : sign(envelope);
}

/** A dead command with message id `id` and partition key `key`, of an ordered type or not. */
function deadCommand(
  id: string,
  key: string,
  ordered: boolean,
  sign?: (envelope: Envelope) => string,
): DeadLetterRecord {
  return buildDeadLetterRecord({
    body: envelopeOf(id, key, sign),
    facts: {
      messageId: id,
      kind: 'command',
      type: COMMAND,
      endpoint: ENDPOINT,
      handler: undefined,
      attempt: 5,
      history: [],
      partitionKey: key,
    },
    handler: 'ChargeCardHandler',
    reason: 'handler-failed',
    error: { name: 'Error', message: 'card declined' },
    ordered,
    now: Date.UTC(2026, 0, 1),
  });
}

/** Ordered records of keys A and B interleaved, and one unordered record. */
const scenario = (): DeadLetterRecord[] => [
  deadCommand('a1', 'A', true),
  deadCommand('b1', 'B', true),
  deadCommand('a2', 'A', true),
  deadCommand('b2', 'B', true),
  deadCommand('u1', 'A', false),
  deadCommand('a3', 'A', true),
];

async function seeded(records: readonly DeadLetterRecord[]): Promise<InMemoryDeadLetterStore> {
  const store = new InMemoryDeadLetterStore();
  for (const record of records) await store.add(record);
  return store;
}

describe('replayDeadLetters', () => {
  let clock: ManualClock;
  const closers: (() => Promise<void>)[] = [];

  beforeEach(() => {
    clock = new ManualClock();
  });

  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });

  function recordingBroker(): RecordingBroker {
    const broker = new RecordingBroker({ clock });
    closers.push(() => broker.close());
    return broker;
  }

  describe('when records of an ordered type share a partition key', () => {
    it('sends each key back one at a time in the order given, different keys in parallel', async () => {
      const records = scenario();
      const store = await seeded(records);
      const broker = recordingBroker();

      const results = await replayDeadLetters({
        store,
        broker,
        ids: records.map((r) => r.id),
        clock,
        concurrency: 8,
      });

      expect(results.map((r) => r.ok)).toEqual(records.map(() => true));
      expect(broker.sent.filter((id) => id.startsWith('a'))).toEqual(['a1', 'a2', 'a3']);
      expect(broker.sent.filter((id) => id.startsWith('b'))).toEqual(['b1', 'b2']);
      expect(broker.maxInFlight).toBeGreaterThan(1);
      // The unordered record u1 (key A too) may overlap with a1..a3; the ordered ones never do.
      expect(broker.maxInFlightPerKey.get('B')).toBe(1);
      expect(broker.sent.indexOf('u1')).toBeLessThan(broker.sent.indexOf('a3'));
    });

    it('sends them back in the same order through the bus as when called directly', async () => {
      const ids = scenario().map((r) => r.id);
      const direct = recordingBroker();
      await replayDeadLetters({
        store: await seeded(scenario()),
        broker: direct,
        ids,
        clock,
        concurrency: 3,
      });

      const viaBus = recordingBroker();
      const bus = createBus({
        endpoint: ENDPOINT,
        broker: viaBus,
        deadLetters: await seeded(scenario()),
        clock,
        logger: silentLogger,
      });
      const results = await bus.replayDeadLetters(ids, { concurrency: 3 });

      expect(results.every((r) => r.ok)).toBe(true);
      expect(viaBus.sent).toEqual(direct.sent);
      expect(viaBus.sent.filter((id) => id.startsWith('a'))).toEqual(['a1', 'a2', 'a3']);
    });
  });

  describe('when concurrency is set', () => {
    it('never has more records under way than it allows', async () => {
      const records = Array.from({ length: 6 }, (_, n) => deadCommand(`u${n}`, `k${n}`, false));
      const store = await seeded(records);
      const broker = recordingBroker();

      await replayDeadLetters({ store, broker, ids: records.map((r) => r.id), clock, concurrency: 2 });

      expect(broker.sent).toHaveLength(6);
      expect(broker.maxInFlight).toBe(2);
    });

    it('goes through the records exactly in the order given when it is 1 (the default)', async () => {
      const records = scenario();
      const broker = recordingBroker();
      await replayDeadLetters({ store: await seeded(records), broker, ids: records.map((r) => r.id), clock });
      expect(broker.sent).toEqual(['a1', 'b1', 'a2', 'b2', 'u1', 'a3']);
      expect(broker.maxInFlight).toBe(1);
    });
  });

  describe('when rate is set', () => {
    it('sends at most `rate` records a second on the injected clock', async () => {
      const records = [
        deadCommand('r1', 'k1', false),
        deadCommand('r2', 'k2', false),
        deadCommand('r3', 'k3', false),
      ];
      const store = await seeded(records);
      const broker = recordingBroker();
      const start = clock.now();

      const done = replayDeadLetters({
        store,
        broker,
        ids: records.map((r) => r.id),
        clock,
        rate: 1,
        concurrency: 3,
      });
      await settled();
      expect(broker.sent).toEqual(['r1']);
      expect(clock.nextTimerAt()).toBe(start + 1000);
      clock.advance(999);
      await settled();
      expect(broker.sent).toHaveLength(1);
      clock.advance(1);
      await settled();
      expect(broker.sent).toHaveLength(2);
      clock.advance(1000);
      const results = await done;

      expect(results.every((r) => r.ok)).toBe(true);
      expect(broker.sent).toHaveLength(3);
      expect((await store.get(records[2]?.id ?? ''))?.replays).toEqual([{ at: start + 2000 }]);
    });

    it('takes no token for a dry run', async () => {
      const records = [deadCommand('d1', 'k1', false), deadCommand('d2', 'k2', false)];
      const store = await seeded(records);
      const results = await replayDeadLetters({
        store,
        broker: recordingBroker(),
        ids: records.map((r) => r.id),
        clock,
        rate: 0.001,
        dryRun: true,
      });
      expect(results).toEqual(records.map((r) => ({ id: r.id, ok: true, dryRun: true })));
    });
  });

  describe('when verifySignature is set and a stored envelope was changed', () => {
    it('refuses that record with signature-invalid and its reason in the result stream', async () => {
      const signer = createEnvelopeSigner({ keys: [KEY] });
      const sign = (envelope: Envelope): string => signer.encode(envelope);
      const good = deadCommand('s1', 'k1', true, sign);
      const signed = deadCommand('s2', 'k1', true, sign);
      const tampered = { ...signed, envelope: signed.envelope.replace('"n":"s2"', '"n":"s200"') };
      expect(tampered.envelope).not.toBe(signed.envelope);
      const reason = signer.verify(tampered.envelope);
      expect(reason).toBeDefined();
      const store = await seeded([tampered, good]);
      const broker = recordingBroker();
      const stream: ReplayResult[] = [];

      await replayDeadLetters({
        store,
        broker,
        ids: [tampered.id, good.id],
        clock,
        verifySignature: (body) => signer.verify(body),
        onResult: (result) => stream.push(result),
      });

      expect(stream).toEqual([
        {
          id: tampered.id,
          ok: false,
          error: 'signature-invalid',
          message: expect.stringContaining(reason ?? '?') as unknown,
        },
        { id: good.id, ok: true },
      ]);
      expect(broker.sent).toEqual(['s1']);
      expect((await store.get(tampered.id))?.status).toBe('dead');
    });
  });

  describe('when onResult is set', () => {
    it('sees each result once as it is known, with its record, before the results in id order', async () => {
      const records = scenario();
      const store = await seeded(records);
      const seen: { result: ReplayResult; record: DeadLetterRecord | undefined }[] = [];
      const ids = ['missing', ...records.map((r) => r.id)];

      const results = await replayDeadLetters({
        store,
        broker: recordingBroker(),
        ids,
        clock,
        concurrency: 4,
        onResult: (result, record) => seen.push({ result, record }),
      });

      expect(results.map((r) => r.id)).toEqual(ids);
      expect(seen.map((s) => s.result.id).sort()).toEqual([...ids].sort());
      expect(seen.find((s) => s.result.id === 'missing')).toMatchObject({
        result: { ok: false, error: 'not-found' },
        record: undefined,
      });
      expect(seen.find((s) => s.result.id === records[0]?.id)?.record).toMatchObject({
        messageId: 'a1',
        partitionKey: 'A',
      });
      expect(summarizeReplay(results)).toEqual({ total: 7, replayed: 6, failed: 1, skipped: 0 });
    });
  });

  describe('when an id is listed twice', () => {
    it('sends it back once and reports the second as already-replayed', async () => {
      const record = deadCommand('t1', 'k1', false);
      const broker = recordingBroker();
      const results = await replayDeadLetters({
        store: await seeded([record]),
        broker,
        ids: [record.id, record.id],
        clock,
        concurrency: 2,
      });
      expect(results).toMatchObject([{ ok: true }, { ok: false, error: 'already-replayed' }]);
      expect(summarizeReplay(results)).toEqual({ total: 2, replayed: 1, failed: 0, skipped: 1 });
      expect(broker.sent).toEqual(['t1']);
    });
  });

  describe('when concurrency or rate is not a positive number', () => {
    it.each([{ concurrency: 0 }, { concurrency: 1.5 }, { rate: 0 }, { rate: Number.NaN }])(
      'throws invalid-option for %o',
      async (bad) => {
        const error: unknown = await replayDeadLetters({
          store: new InMemoryDeadLetterStore(),
          broker: recordingBroker(),
          ids: [],
          clock,
          ...bad,
        }).catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('invalid-option');
      },
    );
  });
});
