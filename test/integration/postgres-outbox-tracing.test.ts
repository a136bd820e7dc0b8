import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { SpanKind } from '@opentelemetry/api';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { startOutboxRelay, type OutboxRelay } from '../../src/postgres/outbox-relay.js';
import { PostgresOutbox } from '../../src/postgres/postgres-outbox.js';
import { postgresUnitOfWork, type PostgresUnitOfWork } from '../../src/postgres/postgres-unit-of-work.js';
import { harrierTracing } from '../../src/telemetry/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { linkedSpanIds, useInMemoryTracing } from '../helpers/tracing.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const PlaceOrder = defineCommand('pgt.PlaceOrder', { schema: z.object({ orderId: z.string() }) });
const OrderPlaced = defineEvent('pgt.OrderPlaced', { schema: z.object({ orderId: z.string() }) });

@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    ctx.publish(OrderPlaced, { orderId: payload.orderId });
  }
}

@EventHandler(OrderPlaced)
class Shipping {
  handle(): void {}
}

const { tracerProvider, exporter, only } = useInMemoryTracing();

describe('tracing through the PostgreSQL outbox', () => {
  let schema: string;
  let bus: MessageBus | undefined;
  let unit: PostgresUnitOfWork | undefined;
  let relay: OutboxRelay | undefined;

  afterEach(async () => {
    await relay?.stop();
    await bus?.stop({ gracePeriodMs: 200 });
    await unit?.close();
    await dropSchema(pool, schema);
    relay = bus = unit = undefined;
  });

  /** A signed, traced bus whose handlers record into the outbox, and a relay publishing it. */
  async function start(): Promise<MessageBus> {
    schema = freshSchema();
    await migratePostgres(pool, { schema });
    unit = postgresUnitOfWork({ connection: pool, schema, logger: silentLogger });
    bus = createBus({
      endpoint: 'shop',
      handlers: [PlaceOrderHandler, Shipping],
      unitOfWork: unit,
      signing: { keys: [randomBytes(32).toString('hex')] },
      telemetry: harrierTracing({ tracerProvider }),
      logger: silentLogger,
    });
    await bus.start();
    relay = await startOutboxRelay({
      connection: pool,
      publisher: bus.publisher,
      schema,
      logger: silentLogger,
    });
    return bus;
  }

  const processed = (): boolean =>
    exporter.getFinishedSpans().some((s) => s.name === 'process pgt.OrderPlaced');

  describe('when a handler under postgresUnitOfWork records an event', () => {
    it("links the relay's send span and the event's process span to the handler's create span", async () => {
      const traced = await start();
      await traced.send(PlaceOrder, { orderId: 'o-1' });
      await waitFor('the event to be processed', processed, { timeoutMs: 10_000 });

      const handled = only('process pgt.PlaceOrder');
      const created = only('create pgt.OrderPlaced');
      expect(created.kind).toBe(SpanKind.PRODUCER);
      expect(created.parentSpanContext?.spanId).toBe(handled.spanContext().spanId);

      // The handler's commit went to the outbox table, not the broker: only the relay sends.
      const sends = exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CLIENT);
      expect(sends.map((s) => [s.name, s.attributes['harrier.origin']])).toEqual([
        ['send pgt.OrderPlaced', 'outbox'],
      ]);
      const send = sends[0]!;
      expect(send.attributes['messaging.batch.message_count']).toBe(1);
      expect(linkedSpanIds(send)).toEqual([created.spanContext().spanId]);
      expect(send.links[0]?.context.traceId).toBe(created.spanContext().traceId);

      const consumed = only('process pgt.OrderPlaced');
      expect(linkedSpanIds(consumed)).toEqual([created.spanContext().spanId]);
    });
  });

  describe('when application code records an event with PostgresOutbox inside its own span', () => {
    it('makes the create span a child of that span, and the relay links to it', async () => {
      const traced = await start();
      const outbox = new PostgresOutbox(traced, { schema });
      const tracer = tracerProvider.getTracer('app');
      await tracer.startActiveSpan('request', async (request) => {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          await outbox.publish(client, OrderPlaced, { orderId: 'o-2' });
          await client.query('COMMIT');
        } finally {
          client.release();
        }
        request.end();
      });
      await waitFor('the event to be processed', processed, { timeoutMs: 10_000 });

      const request = only('request');
      const created = only('create pgt.OrderPlaced');
      expect(created.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
      expect(created.spanContext().traceId).toBe(request.spanContext().traceId);
      const send = only('send pgt.OrderPlaced');
      expect(send.kind).toBe(SpanKind.CLIENT);
      expect(send.attributes['harrier.origin']).toBe('outbox');
      expect(linkedSpanIds(send)).toEqual([created.spanContext().spanId]);
    });
  });
});
