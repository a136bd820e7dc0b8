import 'reflect-metadata';
import { SpanStatusCode } from '@opentelemetry/api';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CommandHandler,
  TransientError,
  createBus,
  silentLogger,
  type MessageBus,
} from '../../../src/index.js';
import { harrierTracing } from '../../../src/telemetry/index.js';
import { useInMemoryTracing } from '../../helpers/tracing.js';
import { PlaceOrder } from '../bus/fixtures.js';

const tracing = useInMemoryTracing();

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop();
  bus = undefined;
});

describe('harrierTracing, when an attempt meets an outage', () => {
  it('adds a harrier.endpoint.paused event to its span and leaves its status unset', async () => {
    let down = true;
    let handled = 0;
    @CommandHandler(PlaceOrder)
    class Handler {
      handle(): void {
        if (down) throw new TransientError('the payments API is down');
        handled++;
      }
    }
    bus = createBus({
      endpoint: 'shop',
      handlers: [Handler],
      logger: silentLogger,
      outage: { probeBaseMs: 10, probeMaxMs: 20 },
      telemetry: harrierTracing({ tracerProvider: tracing.tracerProvider }),
    });
    await bus.start();
    await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
    await vi.waitFor(() => {
      expect(tracing.spans('process test.PlaceOrder').length).toBeGreaterThanOrEqual(1);
    });
    down = false;
    await vi.waitFor(() => {
      expect(handled).toBe(1);
    });
    await tracing.tracerProvider.forceFlush();
    const spans = tracing.spans('process test.PlaceOrder');
    const [first] = spans;
    expect(first?.events.map((e) => e.name)).toEqual(['harrier.endpoint.paused']);
    expect(first?.events[0]?.attributes?.['error.type']).toBe('TransientError');
    expect(first?.status.code).toBe(SpanStatusCode.UNSET);
    // The handled attempt is still attempt 1: the outage counted none.
    expect(spans.at(-1)?.attributes['harrier.attempt']).toBe(1);
  });
});
