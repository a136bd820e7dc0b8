import 'reflect-metadata';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  On,
  Projection,
  createBus,
  defineEvent,
  silentLogger,
  type MessageBus,
  type PayloadOf,
} from '../../../src/index.js';
import { InMemoryCheckpointStore, InMemoryEventLog } from '../../../src/log/index.js';
import { partitionOf } from '../../../src/messages/partition.js';
import { harrierTracing } from '../../../src/telemetry/index.js';
import { createTestBus } from '../../../src/testing/index.js';
import { linkedSpanIds, useInMemoryTracing } from '../../helpers/tracing.js';

const Deposited = defineEvent('ledger.Deposited', {
  schema: z.object({ account: z.string(), amount: z.number() }),
  partitionKey: 'account',
});

const PARTITIONS = 4;
/** An account whose events go to a partition other than 0, so the attribute cannot be right by chance. */
const ACCOUNT = ['a', 'b', 'c', 'd', 'e'].find((key) => partitionOf(key, PARTITIONS) !== 0)!;

/** Once true, the poison event no longer fails (the bug was fixed). */
let healed = false;

/** Fails the first call for amount 7 (then succeeds) and every call for amount 13 (poison) until healed. */
function ledgerView() {
  const tried = new Set<number>();
  @Projection('ledgerView', { retry: { attempts: 2, backoff: { baseMs: 1, jitter: 0 } } })
  class LedgerView {
    @On(Deposited)
    onDeposited(payload: PayloadOf<typeof Deposited>): void {
      if (payload.amount === 13 && !healed) throw new Error('poison');
      if (payload.amount === 7 && !tried.has(7)) {
        tried.add(7);
        throw new Error('flaky');
      }
    }
  }
  return LedgerView;
}

const { tracerProvider, spans } = useInMemoryTracing();

/** The `process` spans of a message, in attempt order. */
function processSpansOf(messageId: string): ReadableSpan[] {
  return spans('process ledger.Deposited')
    .filter((s) => s.attributes['messaging.message.id'] === messageId)
    .sort((a, b) => Number(a.attributes['harrier.attempt']) - Number(b.attributes['harrier.attempt']));
}

const eventNames = (span: ReadableSpan | undefined): string[] => span?.events.map((e) => e.name) ?? [];

describe('harrierTracing', () => {
  const buses: MessageBus[] = [];
  afterEach(async () => {
    await Promise.all(buses.splice(0).map((b) => b.stop()));
    healed = false;
  });

  async function feed(): Promise<{ bus: MessageBus; ok: string; flaky: string; poison: string }> {
    const bus = createBus({
      endpoint: 'reports',
      handlers: [ledgerView()],
      definitions: [Deposited],
      eventLog: new InMemoryEventLog({ topics: [{ name: 'ledger', partitions: PARTITIONS }] }),
      checkpoints: new InMemoryCheckpointStore(),
      logger: silentLogger,
      telemetry: harrierTracing({ tracerProvider }),
    });
    buses.push(bus);
    await bus.start();
    const ok = await bus.publish(Deposited, { account: ACCOUNT, amount: 1 });
    const flaky = await bus.publish(Deposited, { account: ACCOUNT, amount: 7 });
    const poison = await bus.publish(Deposited, { account: ACCOUNT, amount: 13 });
    await bus.projections.whenCaughtUp();
    return { bus, ok, flaky, poison };
  }

  describe('when a projection is fed from the event log', () => {
    it('makes a process span per event with the projection kind and the log position', async () => {
      const { ok, flaky, poison } = await feed();
      const [span] = processSpansOf(ok);
      expect(processSpansOf(ok)).toHaveLength(1);
      expect(span?.kind).toBe(SpanKind.CONSUMER);
      expect(span?.attributes).toMatchObject({
        'messaging.consumer.group.name': 'reports',
        'harrier.handler': 'ledgerView',
        'harrier.handler.kind': 'projection',
        'harrier.attempt': 1,
        'harrier.partition_key': ACCOUNT,
        'messaging.destination.partition.id': String(partitionOf(ACCOUNT, PARTITIONS)),
        'harrier.log.topic': 'ledger',
        'harrier.log.offset': 0,
      });
      expect(processSpansOf(flaky)[0]?.attributes['harrier.log.offset']).toBe(1);
      expect(processSpansOf(poison)[0]?.attributes['harrier.log.offset']).toBe(2);
      // Linked to the publish span of the event it applies.
      expect(linkedSpanIds(span!)).toEqual(
        spans('publish ledger.Deposited')
          .filter((s) => s.attributes['messaging.message.id'] === ok)
          .map((s) => s.spanContext().spanId),
      );
    });

    it('makes one span per attempt of an event that fails once, the first with a scheduled retry', async () => {
      const { flaky } = await feed();
      const [first, second] = processSpansOf(flaky);
      expect(processSpansOf(flaky)).toHaveLength(2);
      expect(first?.attributes['harrier.attempt']).toBe(1);
      expect(first?.status.code).toBe(SpanStatusCode.ERROR);
      expect(eventNames(first)).toEqual(['exception', 'harrier.retry_scheduled']);
      expect(second?.attributes['harrier.attempt']).toBe(2);
      expect(second?.status.code).not.toBe(SpanStatusCode.ERROR);
      expect(eventNames(second)).toEqual([]);
    });

    it('marks the last attempt of a poison event dead-lettered as projection-failed', async () => {
      const { poison } = await feed();
      const [first, last] = processSpansOf(poison);
      expect(processSpansOf(poison)).toHaveLength(2);
      expect(eventNames(first)).toEqual(['exception', 'harrier.retry_scheduled']);
      expect(eventNames(last)).toEqual(['exception', 'harrier.dead_lettered']);
      expect(last?.events[1]?.attributes).toEqual({ 'harrier.dead_letter.reason': 'projection-failed' });
      expect(last?.attributes['error.type']).toBe('Error');
    });
  });

  describe("when a poison event's dead letter is replayed through the bus", () => {
    it('makes a replay span via the projection, an error when it fails again, and a process span per run', async () => {
      const { bus, poison } = await feed();
      const [record] = (await bus.deadLetters.list()).records;
      const published = spans('publish ledger.Deposited').find(
        (s) => s.attributes['messaging.message.id'] === poison,
      );

      expect((await bus.replayDeadLetters([record!.id], { by: 'ops' }))[0]?.ok).toBe(false);
      healed = true;
      expect((await bus.replayDeadLetters([record!.id], { by: 'ops' }))[0]?.ok).toBe(true);

      const replays = spans('replay ledger.Deposited');
      expect(replays.map((s) => s.status.code)).toEqual([SpanStatusCode.ERROR, SpanStatusCode.UNSET]);
      for (const replay of replays) {
        expect(replay.kind).toBe(SpanKind.INTERNAL);
        expect(replay.attributes).toMatchObject({
          'harrier.dead_letter.id': record!.id,
          'harrier.dead_letter.reason': 'projection-failed',
          'harrier.replay.via': 'projection',
          'harrier.replay.by': 'ops',
          'harrier.handler': 'ledgerView',
        });
        expect(linkedSpanIds(replay)).toEqual([published?.spanContext().spanId]);
      }
      // Two attempts live, then the attempts of each replay: the failed one's two, the healed one's one.
      const runs = processSpansOf(poison);
      expect(runs).toHaveLength(5);
      expect(runs.every((s) => s.attributes['harrier.handler.kind'] === 'projection')).toBe(true);
      expect(runs.filter((s) => s.events.some((e) => e.name === 'harrier.dead_lettered'))).toHaveLength(2);
    });
  });

  describe('when a projection is fed by a broker subscription (no event log)', () => {
    it('makes a process span of kind projection, without log attributes', async () => {
      const bus = await createTestBus({
        handlers: [ledgerView()],
        telemetry: harrierTracing({ tracerProvider }),
      });
      buses.push(bus);
      const id = await bus.publish(Deposited, { account: ACCOUNT, amount: 1 });
      await bus.whenIdle();
      const [span] = processSpansOf(id);
      expect(processSpansOf(id)).toHaveLength(1);
      expect(span?.attributes).toMatchObject({
        'harrier.handler': 'ledgerView',
        'harrier.handler.kind': 'projection',
        'harrier.attempt': 1,
      });
      expect(span?.attributes['harrier.log.topic']).toBeUndefined();
      expect(span?.attributes['messaging.destination.partition.id']).toBeUndefined();
    });
  });
});
