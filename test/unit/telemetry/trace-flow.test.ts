import 'reflect-metadata';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  EventHandler,
  On,
  Projection,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import { harrierTracing, type HarrierTracingOptions } from '../../../src/telemetry/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { useInMemoryTracing } from '../../helpers/tracing.js';
import { OrderPlaced, PlaceOrder } from '../bus/fixtures.js';

// The acceptance flow, in memory with the SDK's in-memory exporter:
// send -> command handler -> published event -> two event handlers (one retried, one
// dead-lettered) -> projection.

const tracing = useInMemoryTracing();
const { tracerProvider, exporter } = tracing;

const CORRELATION = '0190a0b0-0000-7000-8000-0000000000aa';

@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
    ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
    return { accepted: true };
  }
}

class PaymentGatewayDown extends Error {
  override name = 'PaymentGatewayDown';
}
class InvoiceRejected extends Error {
  override name = 'InvoiceRejected';
}

@EventHandler(OrderPlaced, { retry: { attempts: 3, immediate: 0, backoff: { baseMs: 50, jitter: 0 } } })
class ChargeOnPlaced {
  handle(_payload: unknown, ctx: MessageContext): void {
    if (ctx.attempt === 1) throw new PaymentGatewayDown('gateway timed out');
  }
}

@EventHandler(OrderPlaced, { retry: { attempts: 2, immediate: 0, backoff: { baseMs: 50, jitter: 0 } } })
class InvoiceOnPlaced {
  handle(): void {
    throw new InvoiceRejected('no billing address');
  }
}

@Projection('order-totals')
class OrderTotals {
  total = 0;
  @On(OrderPlaced)
  onPlaced(payload: PayloadOf<typeof OrderPlaced>): void {
    this.total += payload.amount;
  }
}

const named = (name: string): ReadableSpan[] => tracing.spans(name);

function only(spans: readonly ReadableSpan[]): ReadableSpan {
  expect(spans).toHaveLength(1);
  return spans[0]!;
}

/** The `process test.OrderPlaced` spans of one handler, by attempt. */
function attemptsOf(handler: string): ReadableSpan[] {
  return named('process test.OrderPlaced')
    .filter((s) => s.attributes['harrier.handler'] === handler)
    .sort((a, b) => Number(a.attributes['harrier.attempt']) - Number(b.attributes['harrier.attempt']));
}

function spanId(span: ReadableSpan): string {
  return span.spanContext().spanId;
}

describe('harrierTracing over a whole message flow (in memory)', () => {
  let bus: TestBus | undefined;
  afterEach(async () => {
    await bus?.stop();
    bus = undefined;
  });

  async function run(options: HarrierTracingOptions): Promise<void> {
    bus = await createTestBus({
      endpoint: 'shop',
      handlers: [PlaceOrderHandler, ChargeOnPlaced, InvoiceOnPlaced, OrderTotals],
      telemetry: harrierTracing({ tracerProvider, ...options }),
    });
    await bus.send(PlaceOrder, { orderId: 'o-7', amount: 3 }, { correlationId: CORRELATION });
    await bus.whenIdle();
  }

  describe("with relation: 'parent'", () => {
    it('puts the whole flow in one trace: 1 send, 1 command attempt, 1 create, 1 commit, 5 event attempts', async () => {
      await run({ relation: 'parent' });
      const spans = exporter.getFinishedSpans();
      expect(new Set(spans.map((s) => s.spanContext().traceId)).size).toBe(1);
      expect(spans.map((s) => s.name).sort()).toEqual(
        [
          'send test.PlaceOrder',
          'process test.PlaceOrder',
          'create test.OrderPlaced',
          'send test.OrderPlaced',
          ...Array<string>(5).fill('process test.OrderPlaced'),
        ].sort(),
      );
      expect(attemptsOf('ChargeOnPlaced')).toHaveLength(2);
      expect(attemptsOf('InvoiceOnPlaced')).toHaveLength(2);
      expect(attemptsOf('order-totals')).toHaveLength(1);
    });

    it('chains the spans: send -> process command -> create event (+ commit) -> process event per attempt', async () => {
      await run({ relation: 'parent' });
      const send = only(named('send test.PlaceOrder'));
      const command = only(named('process test.PlaceOrder'));
      const create = only(named('create test.OrderPlaced'));
      const commit = only(named('send test.OrderPlaced'));
      expect(send.kind).toBe(SpanKind.PRODUCER);
      expect(send.parentSpanContext).toBeUndefined();
      expect(command.kind).toBe(SpanKind.CONSUMER);
      expect(command.parentSpanContext?.spanId).toBe(spanId(send));
      expect(command.links.map((l) => l.context.spanId)).toEqual([spanId(send)]);
      expect(create.kind).toBe(SpanKind.PRODUCER);
      expect(create.parentSpanContext?.spanId).toBe(spanId(command));
      expect(commit.kind).toBe(SpanKind.CLIENT);
      expect(commit.parentSpanContext?.spanId).toBe(spanId(command));
      expect(commit.links.map((l) => l.context.spanId)).toEqual([spanId(create)]);
      for (const handler of ['ChargeOnPlaced', 'InvoiceOnPlaced', 'order-totals']) {
        for (const attempt of attemptsOf(handler)) {
          expect(attempt.kind).toBe(SpanKind.CONSUMER);
          expect(attempt.parentSpanContext?.spanId).toBe(spanId(create));
          expect(attempt.links.map((l) => l.context.spanId)).toEqual([spanId(create)]);
        }
      }
    });

    it('names the message, conversation, endpoint, handler, kind and attempt on each span', async () => {
      await run({ relation: 'parent' });
      const [event] = bus!.messagesOf(OrderPlaced);
      const create = only(named('create test.OrderPlaced'));
      expect(create.attributes).toEqual({
        'messaging.system': 'harrier',
        'messaging.destination.name': 'test.OrderPlaced',
        'messaging.operation.name': 'create',
        'messaging.operation.type': 'create',
        'messaging.message.id': event?.envelope.id,
        'messaging.message.conversation_id': CORRELATION,
      });
      expect(only(named('send test.OrderPlaced')).attributes).toMatchObject({
        'messaging.operation.type': 'send',
        'messaging.batch.message_count': 1,
        'harrier.origin': 'handler',
      });
      const [first, second] = attemptsOf('ChargeOnPlaced');
      expect(first?.attributes).toMatchObject({
        'messaging.system': 'harrier',
        'messaging.destination.name': 'test.OrderPlaced',
        'messaging.operation.name': 'process',
        'messaging.operation.type': 'process',
        'messaging.message.id': event?.envelope.id,
        'messaging.message.conversation_id': CORRELATION,
        'messaging.consumer.group.name': 'shop',
        'harrier.handler': 'ChargeOnPlaced',
        'harrier.handler.kind': 'event',
        'harrier.attempt': 1,
        'harrier.partition_key': 'o-7',
      });
      expect(second?.attributes['harrier.attempt']).toBe(2);
      expect(attemptsOf('order-totals')[0]?.attributes['harrier.handler.kind']).toBe('projection');
    });

    it('records the retried attempt with error.type and a harrier.retry_scheduled event', async () => {
      await run({ relation: 'parent' });
      const [failed, handled] = attemptsOf('ChargeOnPlaced');
      expect(failed?.status.code).toBe(SpanStatusCode.ERROR);
      expect(failed?.attributes['error.type']).toBe('PaymentGatewayDown');
      expect(failed?.events.map((e) => e.name)).toEqual(['exception', 'harrier.retry_scheduled']);
      const retry = failed?.events[1];
      expect(retry?.attributes?.['harrier.retry.delay_ms']).toBe(50);
      expect(typeof retry?.attributes?.['harrier.retry.at']).toBe('string');
      expect(handled?.status.code).toBe(SpanStatusCode.UNSET);
      expect(handled?.events).toEqual([]);
    });

    it('records the dead-lettered attempt with a harrier.dead_lettered event and its reason', async () => {
      await run({ relation: 'parent' });
      const [first, last] = attemptsOf('InvoiceOnPlaced');
      expect(first?.events.map((e) => e.name)).toEqual(['exception', 'harrier.retry_scheduled']);
      expect(last?.status.code).toBe(SpanStatusCode.ERROR);
      expect(last?.attributes['error.type']).toBe('InvoiceRejected');
      expect(last?.events.map((e) => e.name)).toEqual(['exception', 'harrier.dead_lettered']);
      expect(last?.events[1]?.attributes).toEqual({ 'harrier.dead_letter.reason': 'handler-failed' });
      const [record] = (await bus!.deadLetters.list()).records;
      expect(record?.handler).toBe('InvoiceOnPlaced');
    });
  });

  describe("with relation: 'link' (the default)", () => {
    it('roots each delivery in its own trace and links it to the span that produced the message', async () => {
      await run({});
      const send = only(named('send test.PlaceOrder'));
      const command = only(named('process test.PlaceOrder'));
      const create = only(named('create test.OrderPlaced'));
      expect(command.parentSpanContext).toBeUndefined();
      expect(command.links[0]?.context).toMatchObject({
        traceId: send.spanContext().traceId,
        spanId: spanId(send),
      });
      // What the command handler caused stays in the handler's trace.
      expect(create.spanContext().traceId).toBe(command.spanContext().traceId);
      const deliveries = named('process test.OrderPlaced');
      expect(deliveries).toHaveLength(5);
      for (const attempt of deliveries) {
        expect(attempt.parentSpanContext).toBeUndefined();
        expect(attempt.spanContext().traceId).not.toBe(command.spanContext().traceId);
        expect(attempt.links[0]?.context).toMatchObject({
          traceId: create.spanContext().traceId,
          spanId: spanId(create),
        });
      }
    });
  });

  describe('when a message is refused before any handler runs', () => {
    it('makes a process span with the dead-letter reason', async () => {
      bus = await createTestBus({
        endpoint: 'shop',
        handlers: [PlaceOrderHandler],
        telemetry: harrierTracing({ tracerProvider }),
      });
      await bus.broker.publish({
        id: 'junk-1',
        kind: 'command',
        type: 'test.PlaceOrder',
        body: '{"not":"an envelope"',
      });
      await bus.whenIdle();
      const span = only(named('process test.PlaceOrder').concat(named('process unknown')));
      expect(span.kind).toBe(SpanKind.CONSUMER);
      expect(span.status.code).toBe(SpanStatusCode.ERROR);
      expect(span.events.map((e) => e.name)).toContain('harrier.dead_lettered');
      expect(span.attributes['messaging.consumer.group.name']).toBe('shop');
    });
  });
});
