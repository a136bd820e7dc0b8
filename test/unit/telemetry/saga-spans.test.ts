import 'reflect-metadata';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  Handles,
  InMemorySagaStore,
  ManualClock,
  Saga,
  StartedBy,
  defineCommand,
  defineEvent,
  type PayloadOf,
  type SagaContext,
} from '../../../src/index.js';
import { harrierTracing } from '../../../src/telemetry/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { linkedSpanIds, useInMemoryTracing } from '../../helpers/tracing.js';

const StartCheckout = defineCommand('st.StartCheckout', { schema: z.object({ cartId: z.string() }) });
const ReserveStock = defineCommand('st.ReserveStock', { schema: z.object({ cartId: z.string() }) });
const ExpireCart = defineCommand('st.ExpireCart', { schema: z.object({ cartId: z.string() }) });
const PaymentReceived = defineEvent('st.PaymentReceived', { schema: z.object({ cartId: z.string() }) });

const State = z.object({ paid: z.boolean().default(false) });
type CheckoutState = z.output<typeof State>;

/** Started by a command: reserves stock and asks for a timeout; paid by an event. */
@Saga('st.Checkout', { state: State })
class Checkout {
  @StartedBy(StartCheckout, { correlate: 'cartId' })
  start(payload: PayloadOf<typeof StartCheckout>, ctx: SagaContext<CheckoutState>): void {
    ctx.send(ReserveStock, { cartId: payload.cartId });
    ctx.requestTimeout(ExpireCart, 1_000, { cartId: payload.cartId });
  }

  @Handles(PaymentReceived, { correlate: 'cartId' })
  paid(_payload: PayloadOf<typeof PaymentReceived>, ctx: SagaContext<CheckoutState>): void {
    ctx.state.paid = true;
  }

  @Handles(ExpireCart)
  expire(_payload: PayloadOf<typeof ExpireCart>, ctx: SagaContext<CheckoutState>): void {
    ctx.complete();
  }
}

/** Takes payments only for checkouts it started: a payment for another is dead-lettered. */
@Saga('st.Strict', { state: State, onMissing: 'dead-letter' })
class Strict {
  @StartedBy(StartCheckout, { correlate: 'cartId' })
  start(): void {}

  @Handles(PaymentReceived, { correlate: 'cartId' })
  paid(_payload: PayloadOf<typeof PaymentReceived>, ctx: SagaContext<CheckoutState>): void {
    ctx.state.paid = true;
  }
}

@CommandHandler(ReserveStock)
class Stock {
  handle(): void {}
}

const { tracerProvider, only } = useInMemoryTracing();

describe('harrierTracing', () => {
  let bus: TestBus | undefined;
  afterEach(async () => {
    await bus?.stop();
    bus = undefined;
  });

  describe('when a saga is started by a command and handles an event', () => {
    async function checkout(): Promise<void> {
      const clock = new ManualClock();
      bus = await createTestBus({
        clock,
        handlers: [Stock],
        sagas: [Checkout],
        sagaStore: new InMemorySagaStore({ clock }),
        deliveryOrder: 'fifo',
        telemetry: harrierTracing({ tracerProvider }),
      });
      await bus.send(StartCheckout, { cartId: 'c-1' });
      await bus.publish(PaymentReceived, { cartId: 'c-1' });
      await bus.whenIdle();
    }

    it('makes a process span per step, of kind saga, with the saga name and id', async () => {
      await checkout();
      for (const name of [
        'process st.StartCheckout',
        'process st.PaymentReceived',
        'process st.ExpireCart',
      ]) {
        const step = only(name);
        expect(step.kind).toBe(SpanKind.CONSUMER);
        expect(step.attributes).toMatchObject({
          'harrier.handler': 'st.Checkout',
          'harrier.handler.kind': 'saga',
          'harrier.saga.name': 'st.Checkout',
          'harrier.saga.id': 'c-1',
        });
      }
    });

    it("makes the step's command and timeout create spans of its process span, committed under one send span", async () => {
      await checkout();
      const step = only('process st.StartCheckout');
      const reserve = only('create st.ReserveStock');
      const timeout = only('create st.ExpireCart');
      for (const created of [reserve, timeout]) {
        expect(created.kind).toBe(SpanKind.PRODUCER);
        expect(created.parentSpanContext?.spanId).toBe(step.spanContext().spanId);
      }
      const send = only('send');
      expect(send.kind).toBe(SpanKind.CLIENT);
      expect(send.parentSpanContext?.spanId).toBe(step.spanContext().spanId);
      expect(send.attributes).toMatchObject({
        'messaging.batch.message_count': 2,
        'harrier.origin': 'handler',
      });
      expect(new Set(linkedSpanIds(send))).toEqual(
        new Set([reserve.spanContext().spanId, timeout.spanContext().spanId]),
      );
      // The timeout, when it fires, is linked to the step that asked for it.
      expect(linkedSpanIds(only('process st.ExpireCart'))).toEqual([timeout.spanContext().spanId]);
      expect(linkedSpanIds(only('process st.ReserveStock'))).toEqual([reserve.spanContext().spanId]);
    });
  });

  describe("when a step's instance is missing and onMissing is 'dead-letter'", () => {
    it('marks its process span dead-lettered as saga-not-found', async () => {
      bus = await createTestBus({ sagas: [Strict], telemetry: harrierTracing({ tracerProvider }) });
      await bus.publish(PaymentReceived, { cartId: 'c-9' });
      await bus.whenIdle();
      expect(await bus.deadLetters.count()).toBe(1);
      const step = only('process st.PaymentReceived');
      expect(step.attributes).toMatchObject({
        'harrier.handler.kind': 'saga',
        'harrier.saga.name': 'st.Strict',
        'harrier.saga.id': 'c-9',
        'error.type': 'SagaNotFoundError',
      });
      expect(step.status.code).toBe(SpanStatusCode.ERROR);
      const deadLettered = step.events.find((e) => e.name === 'harrier.dead_lettered');
      expect(deadLettered?.attributes).toEqual({ 'harrier.dead_letter.reason': 'saga-not-found' });
    });
  });
});
