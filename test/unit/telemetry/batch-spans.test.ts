import 'reflect-metadata';
import { SpanKind } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  defineCommand,
  defineEvent,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import { harrierTracing, parseTraceparent } from '../../../src/telemetry/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { linkedSpanIds, useInMemoryTracing } from '../../helpers/tracing.js';

const PlaceOrder = defineCommand('batch.PlaceOrder', {
  schema: z.object({ orderId: z.string(), lines: z.number(), ship: z.boolean() }),
});
const LineAdded = defineEvent('batch.LineAdded', {
  schema: z.object({ orderId: z.string(), n: z.number() }),
});
const ShipOrder = defineCommand('batch.ShipOrder', { schema: z.object({ orderId: z.string() }) });

/** Records one LineAdded per line, and a ShipOrder when asked: several messages in one commit. */
@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    for (let n = 1; n <= payload.lines; n++) ctx.publish(LineAdded, { orderId: payload.orderId, n });
    if (payload.ship) ctx.send(ShipOrder, { orderId: payload.orderId });
  }
}

@EventHandler(LineAdded)
class Lines {
  handle(): void {}
}

@CommandHandler(ShipOrder)
class Shipping {
  handle(): void {}
}

const { tracerProvider, spans, only } = useInMemoryTracing();

describe('harrierTracing', () => {
  let bus: TestBus | undefined;
  afterEach(async () => {
    await bus?.stop();
    bus = undefined;
  });

  async function place(lines: number, ship: boolean): Promise<void> {
    bus = await createTestBus({
      handlers: [PlaceOrderHandler, Lines, Shipping],
      telemetry: harrierTracing({ tracerProvider }),
    });
    await bus.send(PlaceOrder, { orderId: 'o-1', lines, ship });
    await bus.whenIdle();
  }

  describe('when a handler records several messages', () => {
    it('makes one create PRODUCER span per message, each a child of the handler call, carried as its traceparent', async () => {
      await place(2, true);
      const handled = only('process batch.PlaceOrder');
      const creates = [...spans('create batch.LineAdded'), ...spans('create batch.ShipOrder')];
      expect(creates).toHaveLength(3);
      for (const create of creates) {
        expect(create.kind).toBe(SpanKind.PRODUCER);
        expect(create.attributes['messaging.operation.type']).toBe('create');
        expect(create.parentSpanContext?.spanId).toBe(handled.spanContext().spanId);
      }
      const sent = [...bus!.messagesOf(LineAdded), ...bus!.messagesOf(ShipOrder)];
      expect(new Set(sent.map((m) => parseTraceparent(m.envelope.meta.traceparent)?.spanId))).toEqual(
        new Set(creates.map((s) => s.spanContext().spanId)),
      );
    });

    it('commits them under one CLIENT send span with the batch size and a link per message', async () => {
      await place(2, true);
      const handled = only('process batch.PlaceOrder');
      const send = only('send');
      expect(send.kind).toBe(SpanKind.CLIENT);
      expect(send.parentSpanContext?.spanId).toBe(handled.spanContext().spanId);
      expect(send.attributes).toMatchObject({
        'messaging.operation.name': 'send',
        'messaging.operation.type': 'send',
        'messaging.batch.message_count': 3,
        'harrier.origin': 'handler',
      });
      // A mixed batch has no one destination.
      expect(send.attributes['messaging.destination.name']).toBeUndefined();
      const creates = [...spans('create batch.LineAdded'), ...spans('create batch.ShipOrder')];
      expect(new Set(linkedSpanIds(send))).toEqual(new Set(creates.map((s) => s.spanContext().spanId)));
      const ids = [...bus!.messagesOf(LineAdded), ...bus!.messagesOf(ShipOrder)].map((m) => m.envelope.id);
      expect(new Set(send.links.map((l) => l.attributes?.['messaging.message.id']))).toEqual(new Set(ids));
    });

    it('names a batch of one type after it', async () => {
      await place(3, false);
      const send = only('send batch.LineAdded');
      expect(send.kind).toBe(SpanKind.CLIENT);
      expect(send.attributes['messaging.destination.name']).toBe('batch.LineAdded');
      expect(send.attributes['messaging.batch.message_count']).toBe(3);
      expect(send.links).toHaveLength(3);
      expect(spans().filter((s) => s.kind === SpanKind.CLIENT)).toHaveLength(1);
    });
  });

  describe('when a handler records nothing', () => {
    it('makes no send span', async () => {
      await place(0, false);
      expect(only('process batch.PlaceOrder').kind).toBe(SpanKind.CONSUMER);
      expect(spans().filter((s) => s.kind === SpanKind.CLIENT)).toEqual([]);
    });
  });
});
