import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { MeterProvider, MetricReader, type DataPoint } from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { On, Projection, createBus, defineEvent, silentLogger } from '../../../src/index.js';
import { buildDeadLetterRecord } from '../../../src/dead-letters/dead-letter-record.js';
import { InMemoryEventLog } from '../../../src/log/index.js';
import { harrierTelemetry } from '../../../src/telemetry/index.js';

class Reader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

const Deposited = defineEvent('bankr.Deposited', {
  schema: z.object({ account: z.string(), amount: z.number() }),
  partitionKey: 'account',
  topic: 'bankr',
});
const Withdrawn = defineEvent('bankr.Withdrawn', {
  schema: z.object({ account: z.string(), amount: z.number() }),
  partitionKey: 'account',
  topic: 'bankr',
});

let applied = 0;
@Projection('deposits')
class Deposits {
  @On(Deposited)
  onDeposited(): void {
    applied++;
  }
}

async function deadLetterCount(reader: Reader): Promise<number> {
  const { resourceMetrics } = await reader.collect();
  const metric = resourceMetrics.scopeMetrics
    .flatMap((scope) => scope.metrics)
    .find((m) => m.descriptor.name === 'harrier.dead_letters');
  return ((metric?.dataPoints ?? []) as DataPoint<number>[]).reduce((sum, point) => sum + point.value, 0);
}

describe('telemetry of a projection fed from the event log', () => {
  function setUp() {
    applied = 0;
    const reader = new Reader();
    const exporter = new InMemorySpanExporter();
    const bus = createBus({
      endpoint: 'reports',
      handlers: [Deposits],
      definitions: [Deposited, Withdrawn],
      eventLog: new InMemoryEventLog({ topics: [{ name: 'bankr', partitions: 1 }] }),
      logger: silentLogger,
      telemetry: harrierTelemetry({
        tracing: {
          tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
        },
        metrics: { meterProvider: new MeterProvider({ readers: [reader] }) },
      }),
    });
    return { bus, reader, exporter };
  }

  it('reports nothing for events of types the projection has no @On for', async () => {
    const { bus, reader, exporter } = setUp();
    await bus.start();
    try {
      await bus.publish(Withdrawn, { account: 'a', amount: 1 });
      await bus.publish(Withdrawn, { account: 'a', amount: 2 });
      await bus.publish(Deposited, { account: 'a', amount: 3 });
      await expect.poll(() => applied).toBe(1);
      await bus.projections.whenCaughtUp();
      expect(await deadLetterCount(reader)).toBe(0);
      expect(await bus.deadLetters.count()).toBe(0);
      const processed = exporter.getFinishedSpans().filter((s) => s.name.startsWith('process '));
      expect(processed.map((s) => s.name)).toEqual(['process bankr.Deposited']);
    } finally {
      await bus.stop();
    }
  });

  it('counts no dead letter for a replay the projection refuses before its handler (nothing is stored)', async () => {
    const { bus, reader } = setUp();
    await bus.start();
    try {
      const id = randomUUID();
      // Stored under an older schema: the payload no longer validates.
      const body = JSON.stringify({
        v: 1,
        id,
        kind: 'event',
        type: Deposited.type,
        payload: { account: 'a', amount: 'x' },
        meta: { correlationId: id, occurredAt: new Date().toISOString(), headers: {} },
      });
      const record = buildDeadLetterRecord({
        body,
        facts: {
          messageId: id,
          type: Deposited.type,
          endpoint: 'reports',
          kind: 'event',
          handler: 'deposits',
          partitionKey: 'a',
          attempt: 3,
          history: [],
        },
        handler: 'deposits',
        reason: 'projection-failed',
        error: { name: 'E', message: 'm' },
        ordered: false,
        now: Date.now(),
        logPosition: { topic: 'bankr', partition: 0, offset: 0 },
      });
      const refusal = await bus.projections.replayDeadLetter(record);
      expect(refusal?.code).toBe('malformed');
      expect(await deadLetterCount(reader)).toBe(0);
    } finally {
      await bus.stop();
    }
  });
});
