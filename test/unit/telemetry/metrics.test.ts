import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { MeterProvider, MetricReader, type DataPoint, type MetricData } from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  On,
  Projection,
  TransientError,
  createBus,
  defineEvent,
  silentLogger,
  type MessageBus,
} from '../../../src/index.js';
import { InMemoryEventLog } from '../../../src/log/index.js';
import { harrierMetrics, harrierTelemetry } from '../../../src/telemetry/index.js';
import { createTestBus } from '../../../src/testing/index.js';
import { PlaceOrder } from '../bus/fixtures.js';
import { Broken, Flaky, PlaceOrderHandler, processInfo } from './fixtures.js';

/** A reader that exports nothing: the test collects when it wants to look. */
class OnDemandReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

const providers: MeterProvider[] = [];
const buses: MessageBus[] = [];

afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop()));
  await Promise.all(providers.splice(0).map((provider) => provider.shutdown()));
});

/** A meter provider of its own per test (cumulative counts would leak across tests otherwise). */
function sdk(): { meterProvider: MeterProvider; collect: () => Promise<MetricData[]> } {
  const reader = new OnDemandReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  providers.push(meterProvider);
  return {
    meterProvider,
    collect: async () => {
      const { resourceMetrics, errors } = await reader.collect();
      expect(errors).toEqual([]);
      return resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics);
    },
  };
}

function metric(metrics: readonly MetricData[], name: string): MetricData | undefined {
  return metrics.find((m) => m.descriptor.name === name);
}

/** The data points of `name` whose attributes include `attributes`. */
function points(
  metrics: readonly MetricData[],
  name: string,
  attributes: Record<string, string> = {},
): DataPoint<unknown>[] {
  const found = (metric(metrics, name)?.dataPoints ?? []) as DataPoint<unknown>[];
  return found.filter((point) =>
    Object.entries(attributes).every(([key, value]) => point.attributes[key] === value),
  );
}

/** The sum of a counter's (or gauge's) points that match `attributes`. */
function total(metrics: readonly MetricData[], name: string, attributes: Record<string, string> = {}) {
  return points(metrics, name, attributes).reduce((sum, point) => sum + (point.value as number), 0);
}

/** How many calls the duration histogram recorded with `attributes`. */
function recorded(metrics: readonly MetricData[], attributes: Record<string, string>): number {
  return points(metrics, 'messaging.process.duration', attributes).reduce(
    (sum, point) => sum + (point.value as { count: number }).count,
    0,
  );
}

describe('harrierMetrics', () => {
  describe('when a command handler publishes an event that one handler retries and one dead-letters', () => {
    async function run() {
      const { meterProvider, collect } = sdk();
      const bus = await createTestBus({
        endpoint: 'shop',
        handlers: [PlaceOrderHandler, Flaky, Broken],
        telemetry: harrierMetrics({ meterProvider }),
      });
      buses.push(bus);
      await bus.send(PlaceOrder, { orderId: 'o-1', amount: 2 });
      await bus.whenIdle();
      return collect();
    }

    it('records one duration per handler call, by outcome, with error.type on failures', async () => {
      const metrics = await run();
      const common = {
        'messaging.system': 'harrier',
        'messaging.operation.name': 'process',
        'messaging.consumer.group.name': 'shop',
      };
      expect(metric(metrics, 'messaging.process.duration')?.descriptor.unit).toBe('s');
      expect(
        recorded(metrics, {
          ...common,
          'messaging.destination.name': 'test.PlaceOrder',
          'harrier.handler': 'PlaceOrderHandler',
          'harrier.handler.kind': 'command',
          'harrier.outcome': 'handled',
        }),
      ).toBe(1);
      const event = { ...common, 'messaging.destination.name': 'test.OrderPlaced' };
      expect(recorded(metrics, { ...event, 'harrier.handler': 'Flaky', 'harrier.outcome': 'retry' })).toBe(1);
      expect(
        recorded(metrics, {
          ...event,
          'harrier.handler': 'Flaky',
          'harrier.outcome': 'retry',
          'error.type': 'FlakyError',
        }),
      ).toBe(1);
      expect(recorded(metrics, { ...event, 'harrier.handler': 'Flaky', 'harrier.outcome': 'handled' })).toBe(
        1,
      );
      expect(
        recorded(metrics, {
          ...event,
          'harrier.handler': 'Broken',
          'harrier.outcome': 'retry',
          'error.type': 'BrokenError',
        }),
      ).toBe(1);
      expect(
        recorded(metrics, {
          ...event,
          'harrier.handler': 'Broken',
          'harrier.outcome': 'dead-letter',
          'error.type': 'BrokenError',
        }),
      ).toBe(1);
      expect(recorded(metrics, {})).toBe(5);
      const handled = points(metrics, 'messaging.process.duration', { 'harrier.outcome': 'handled' });
      expect(handled.every((point) => point.attributes['error.type'] === undefined)).toBe(true);
    });

    it('counts each delivery as consumed and each message handed to the broker as sent', async () => {
      const metrics = await run();
      expect(total(metrics, 'messaging.client.consumed.messages')).toBe(5);
      expect(
        total(metrics, 'messaging.client.consumed.messages', {
          'harrier.handler': 'Broken',
          'harrier.outcome': 'dead-letter',
          'error.type': 'BrokenError',
        }),
      ).toBe(1);
      expect(total(metrics, 'messaging.client.sent.messages')).toBe(2);
      const [sentCommand] = points(metrics, 'messaging.client.sent.messages', {
        'messaging.destination.name': 'test.PlaceOrder',
      });
      expect(sentCommand?.value).toBe(1);
      expect(sentCommand?.attributes).toEqual({
        'messaging.system': 'harrier',
        'messaging.destination.name': 'test.PlaceOrder',
        'messaging.operation.name': 'send',
      });
      expect(
        total(metrics, 'messaging.client.sent.messages', {
          'messaging.destination.name': 'test.OrderPlaced',
          'messaging.operation.name': 'publish',
          'harrier.origin': 'handler',
        }),
      ).toBe(1);
    });

    it('counts the dead letter by reason', async () => {
      const metrics = await run();
      const [deadLetter, ...others] = points(metrics, 'harrier.dead_letters');
      expect(others).toEqual([]);
      expect(deadLetter?.value).toBe(1);
      expect(deadLetter?.attributes).toEqual({
        'messaging.system': 'harrier',
        'messaging.destination.name': 'test.OrderPlaced',
        'messaging.consumer.group.name': 'shop',
        'harrier.handler': 'Broken',
        'harrier.dead_letter.reason': 'handler-failed',
      });
    });
  });

  describe('when a received message is refused before any handler ran', () => {
    it('counts it as consumed and dead-lettered with its reason', async () => {
      const { meterProvider, collect } = sdk();
      const bus = await createTestBus({
        endpoint: 'shop',
        handlers: [PlaceOrderHandler],
        telemetry: harrierMetrics({ meterProvider }),
      });
      buses.push(bus);
      await bus.start();
      await bus.broker.publish({
        id: randomUUID(),
        kind: 'command',
        type: PlaceOrder.type,
        body: 'not json',
      });
      await bus.whenIdle();
      const metrics = await collect();
      expect(total(metrics, 'harrier.dead_letters', { 'harrier.dead_letter.reason': 'malformed' })).toBe(1);
      expect(
        total(metrics, 'messaging.client.consumed.messages', {
          'harrier.outcome': 'dead-letter',
          'error.type': 'MessageDecodeError',
        }),
      ).toBe(1);
      expect(recorded(metrics, {})).toBe(0);
    });
  });

  describe('when a commit fails', () => {
    it('counts its messages as sent with error.type', async () => {
      const { meterProvider, collect } = sdk();
      const telemetry = harrierMetrics({ meterProvider });
      const message = { id: randomUUID(), kind: 'event' as const, type: 'test.OrderPlaced', body: '{}' };
      const failure = Object.assign(new Error('down'), { name: 'RedisDown' });
      await expect(
        telemetry.publish?.([message, { ...message, id: randomUUID() }], 'outbox', () =>
          Promise.reject(failure),
        ),
      ).rejects.toBe(failure);
      const metrics = await collect();
      expect(points(metrics, 'messaging.client.sent.messages')).toMatchObject([
        {
          value: 2,
          attributes: {
            'messaging.destination.name': 'test.OrderPlaced',
            'messaging.operation.name': 'publish',
            'harrier.origin': 'outbox',
            'error.type': 'RedisDown',
          },
        },
      ]);
    });
  });

  describe('without an SDK registered', () => {
    it('observes nothing, so the pipeline runs each call as without telemetry', () => {
      const telemetry = harrierMetrics();
      const info = processInfo();
      expect(telemetry.process(info)).toBeUndefined();
      expect(harrierMetrics({ meterProvider: sdk().meterProvider }).process(info)).toBeDefined();
    });
  });

  describe('.traceparent', () => {
    it('gives none, so a message keeps the traceparent it inherits', () => {
      const telemetry = harrierMetrics({ meterProvider: sdk().meterProvider });
      const traceparent = telemetry.traceparent({
        id: randomUUID(),
        kind: 'command',
        type: 'test.PlaceOrder',
        correlationId: randomUUID(),
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        deferred: false,
      });
      expect(traceparent).toBeUndefined();
    });
  });

  describe('.observe', () => {
    it('reads the gauges at each collection until the returned function is called', async () => {
      const { meterProvider, collect } = sdk();
      const telemetry = harrierMetrics({ meterProvider });
      let reads = 0;
      const stop = telemetry.observe?.({
        endpoint: 'shop',
        queueDepths: () => {
          reads++;
          return Promise.resolve([{ queue: 'cmd~test.PlaceOrder', waiting: 3, active: 1, delayed: 2 }]);
        },
      });
      const metrics = await collect();
      expect(reads).toBe(1);
      const state = (name: string) =>
        total(metrics, 'harrier.queue.depth', {
          'messaging.consumer.group.name': 'shop',
          'harrier.queue': 'cmd~test.PlaceOrder',
          'harrier.queue.state': name,
        });
      expect([state('waiting'), state('active'), state('delayed')]).toEqual([3, 1, 2]);
      stop?.();
      await collect();
      expect(reads).toBe(1);
    });

    it('skips a source that fails and still reads the others', async () => {
      const { meterProvider, collect } = sdk();
      const telemetry = harrierMetrics({ meterProvider });
      telemetry.observe?.({
        endpoint: 'shop',
        projectionLag: () => Promise.reject(new Error('log unavailable')),
        queueDepths: () => Promise.resolve([{ queue: 'q', waiting: 4, active: 0, delayed: 0 }]),
      });
      const metrics = await collect();
      expect(points(metrics, 'harrier.projection.lag')).toEqual([]);
      expect(total(metrics, 'harrier.queue.depth', { 'harrier.queue.state': 'waiting' })).toBe(4);
    });
  });

  describe('with a projection fed from the event log', () => {
    const Deposited = defineEvent('bank.Deposited', {
      schema: z.object({ account: z.string(), amount: z.number() }),
      partitionKey: 'account',
      topic: 'bank',
    });

    it('reports its lag per partition while it is behind, and 0 once it caught up', async () => {
      const { meterProvider, collect } = sdk();
      let release: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let entered = false;
      @Projection('balances')
      class Balances {
        @On(Deposited)
        async onDeposited(): Promise<void> {
          entered = true;
          await gate;
        }
      }
      const bus = createBus({
        endpoint: 'reports',
        handlers: [Balances],
        definitions: [Deposited],
        eventLog: new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] }),
        logger: silentLogger,
        telemetry: harrierMetrics({ meterProvider }),
      });
      buses.push(bus);
      await bus.start();
      for (let i = 0; i < 3; i++) await bus.publish(Deposited, { account: 'a', amount: i });
      await expect.poll(() => entered).toBe(true);
      const lag = async () =>
        points(await collect(), 'harrier.projection.lag', {
          'messaging.consumer.group.name': 'reports',
          'harrier.projection': 'balances',
          'harrier.log.topic': 'bank',
          'messaging.destination.partition.id': '0',
        }).map((point) => point.value);
      expect(await lag()).toEqual([3]);
      release();
      await bus.projections.whenCaughtUp();
      expect(await lag()).toEqual([0]);
    });
  });
});

describe('harrierTelemetry', () => {
  const contextManager = new AsyncLocalStorageContextManager();
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  beforeAll(() => {
    context.setGlobalContextManager(contextManager.enable());
  });
  afterAll(async () => {
    context.disable();
    await tracerProvider.shutdown();
  });

  it('makes both spans and metrics', async () => {
    const { meterProvider, collect } = sdk();
    const bus = await createTestBus({
      endpoint: 'shop',
      handlers: [PlaceOrderHandler, Flaky],
      telemetry: harrierTelemetry({ tracing: { tracerProvider }, metrics: { meterProvider } }),
    });
    buses.push(bus);
    await bus.send(PlaceOrder, { orderId: 'o-1', amount: 2 });
    await bus.whenIdle();
    const processSpans = exporter.getFinishedSpans().filter((span) => span.name.startsWith('process '));
    expect(processSpans).toHaveLength(3);
    const metrics = await collect();
    expect(recorded(metrics, {})).toBe(3);
    expect(total(metrics, 'messaging.client.sent.messages')).toBe(2);
    const [command] = bus.messagesOf(PlaceOrder);
    expect(command?.envelope.meta.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  });
});

describe('harrierMetrics, when an outage pauses the endpoint', () => {
  it('holds harrier.endpoint.paused at 1 while paused and back at 0 once resumed', async () => {
    const { meterProvider, collect } = sdk();
    let down = true;
    let paused = 0;
    let resumed = 0;
    let handled = 0;
    @CommandHandler(PlaceOrder)
    class Handler {
      handle(): void {
        if (down) throw new TransientError('the payments API is down');
        handled++;
      }
    }
    const bus = createBus({
      endpoint: 'shop',
      handlers: [Handler],
      logger: silentLogger,
      outage: { probeBaseMs: 10, probeMaxMs: 20 },
      telemetry: harrierMetrics({ meterProvider }),
      hooks: {
        onPaused: () => {
          paused++;
        },
        onResumed: () => {
          resumed++;
        },
      },
    });
    buses.push(bus);
    await bus.start();
    await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
    await vi.waitFor(() => {
      expect(paused).toBe(1);
    });
    expect(
      total(await collect(), 'harrier.endpoint.paused', { 'messaging.consumer.group.name': 'shop' }),
    ).toBe(1);
    down = false;
    await vi.waitFor(() => {
      expect(handled).toBe(1);
      expect(resumed).toBe(1);
    });
    expect(total(await collect(), 'harrier.endpoint.paused')).toBe(0);
  });
});
