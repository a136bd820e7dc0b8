import 'reflect-metadata';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { CommandHandler, defineCommand, type MessageContext } from '../../../src/index.js';
import { harrierTracing } from '../../../src/telemetry/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { linkedSpanIds, useInMemoryTracing } from '../../helpers/tracing.js';

const Charge = defineCommand('rp.Charge', { schema: z.object({ n: z.number() }) });

let failing = true;

/** Fails while `failing` is set, on its only attempt. */
@CommandHandler(Charge, { retry: { attempts: 1 } })
class ChargeHandler {
  handle(_payload: unknown, _ctx: MessageContext): void {
    if (failing) throw new Error('gateway down');
  }
}

const { tracerProvider, spans, only } = useInMemoryTracing();

describe('harrierTracing', () => {
  let bus: TestBus | undefined;
  afterEach(async () => {
    await bus?.stop();
    bus = undefined;
    failing = true;
  });

  /** A bus with one dead letter of rp.Charge; returns its record id. */
  async function deadLetter(): Promise<string> {
    bus = await createTestBus({
      endpoint: 'billing',
      handlers: [ChargeHandler],
      telemetry: harrierTracing({ tracerProvider }),
    });
    await bus.send(Charge, { n: 1 });
    await bus.whenIdle();
    const [record] = (await bus.deadLetters.list()).records;
    expect(record?.reason).toBe('handler-failed');
    return record!.id;
  }

  describe('when a dead letter is replayed through the bus', () => {
    it('makes an INTERNAL replay span with the record, linked to the original send span', async () => {
      const id = await deadLetter();
      failing = false;
      const [result] = await bus!.replayDeadLetters([id], { by: 'ops' });
      expect(result?.ok).toBe(true);
      await bus!.whenIdle();

      const replay = only('replay rp.Charge');
      const send = only('send rp.Charge');
      expect(replay.kind).toBe(SpanKind.INTERNAL);
      expect(replay.attributes).toMatchObject({
        'messaging.destination.name': 'rp.Charge',
        'messaging.message.id': bus!.messagesOf(Charge)[0]?.envelope.id,
        'messaging.consumer.group.name': 'billing',
        'harrier.handler': 'ChargeHandler',
        'harrier.dead_letter.id': id,
        'harrier.dead_letter.reason': 'handler-failed',
        'harrier.replay.via': 'redeliver',
        'harrier.replay.by': 'ops',
      });
      expect(linkedSpanIds(replay)).toEqual([send.spanContext().spanId]);
      expect(replay.status.code).not.toBe(SpanStatusCode.ERROR);
      // The replayed delivery is handled again, still linked to the original producer span.
      const processed = spans('process rp.Charge');
      expect(processed.map((s) => s.status.code === SpanStatusCode.ERROR)).toEqual([true, false]);
      expect(linkedSpanIds(processed[1]!)).toEqual([send.spanContext().spanId]);
    });
  });

  describe('when the broker refuses the redelivery', () => {
    it('marks the replay span with an error status', async () => {
      const id = await deadLetter();
      vi.spyOn(bus!.broker, 'redeliver').mockRejectedValue(new Error('broker down'));
      const [result] = await bus!.replayDeadLetters([id]);
      expect(result).toMatchObject({ ok: false, error: 'redeliver-failed' });
      const replay = only('replay rp.Charge');
      expect(replay.status.code).toBe(SpanStatusCode.ERROR);
      expect(replay.attributes['error.type']).toBe('Error');
      expect(replay.attributes['harrier.replay.by']).toBeUndefined();
      expect(replay.events.map((e) => e.name)).toEqual(['exception']);
    });
  });
});
