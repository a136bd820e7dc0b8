import 'reflect-metadata';
import { Container, inject, injectable } from 'inversify';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  DuplicateHandlerError,
  EventHandler,
  HarrierError,
  HarrierTokens,
  HandlerNotFoundError,
  InMemoryBroker,
  InMemoryEventLog,
  MessageValidationError,
  QueryHandler,
  UnrecoverableError,
  createBus,
  defineCommand,
  silentLogger,
  type Envelope,
  type MessageContext,
  type Middleware,
  type PayloadOf,
} from '../../../src/index.js';
import { encodeEnvelope, isUuidV7 } from '../../../src/extend.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';
import { GetTotal, OrderPlaced, PlaceOrder, ReserveStock } from './fixtures.js';

/** Resolves once `condition` holds, checking after every turn of the event loop (fails after 5 s). */
async function waitUntil(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met within 5 s');
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

let bus: TestBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

/** A PlaceOrder handler that counts its calls. */
function countingHandler(): { readonly Handler: new () => object; readonly calls: () => number } {
  let calls = 0;
  @CommandHandler(PlaceOrder)
  class Handler {
    handle(): void {
      calls++;
    }
  }
  return { Handler, calls: () => calls };
}

describe('MessageBus', () => {
  describe('.send', () => {
    describe('when the command has a handler', () => {
      it('handles it once and acknowledges it', async () => {
        const seen: PayloadOf<typeof PlaceOrder>[] = [];
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>) {
            seen.push(payload);
            return { accepted: true };
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 3 });
        await bus.whenIdle();
        expect(seen).toEqual([{ orderId: 'o-1', amount: 3 }]);
        expect(bus.broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
      });
    });

    describe('when no endpoint handles the command', () => {
      it('throws no-route naming the decorator and the option, and sends nothing', async () => {
        bus = await createTestBus({ definitions: [ReserveStock] });
        const error = await bus.send(ReserveStock, { orderId: 'o-1' }).catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('no-route');
        expect((error as Error).message).toContain('No endpoint handles command "test.ReserveStock"');
        expect((error as Error).message).toContain('@CommandHandler(ReserveStock)');
        expect((error as Error).message).toContain('requireCommandRoute: false');
        expect(bus.sent).toHaveLength(0);
        expect(bus.broker.stats()).toEqual({ ready: 0, waiting: 0, inFlight: 0, unconsumed: 0 });
      });
    });

    describe('when another bus on the broker handles the command', () => {
      it('sends it to that bus', async () => {
        const seen: string[] = [];
        @CommandHandler(ReserveStock)
        class Handler {
          handle(payload: PayloadOf<typeof ReserveStock>) {
            seen.push(payload.orderId);
          }
        }
        const broker = new InMemoryBroker();
        const handler = createBus({ endpoint: 'stock', broker, handlers: [Handler], logger: silentLogger });
        const sender = createBus({
          endpoint: 'web',
          broker,
          definitions: [ReserveStock],
          logger: silentLogger,
        });
        await handler.start();
        try {
          await sender.send(ReserveStock, { orderId: 'o-1' });
          await waitUntil(() => seen.length > 0);
          expect(seen).toEqual(['o-1']);
        } finally {
          await sender.stop({ closeBroker: false });
          await handler.stop();
        }
      });
    });

    describe('when requireCommandRoute is false and the handler starts later', () => {
      it('accepts the command, which waits in its queue for the handler', async () => {
        const seen: string[] = [];
        @CommandHandler(ReserveStock)
        class Handler {
          handle(payload: PayloadOf<typeof ReserveStock>) {
            seen.push(payload.orderId);
          }
        }
        const broker = new InMemoryBroker();
        const sender = createBus({
          endpoint: 'web',
          broker,
          definitions: [ReserveStock],
          requireCommandRoute: false,
          logger: silentLogger,
        });
        const handler = createBus({ endpoint: 'stock', broker, handlers: [Handler], logger: silentLogger });
        try {
          await sender.send(ReserveStock, { orderId: 'o-1' });
          expect(broker.stats().unconsumed).toBe(1);
          await handler.start();
          await waitUntil(() => seen.length > 0);
          expect(seen).toEqual(['o-1']);
        } finally {
          await sender.stop({ closeBroker: false });
          await handler.stop();
        }
      });
    });

    describe('when this bus handles the command but is not started yet', () => {
      it('accepts it and handles it once started', async () => {
        const seen: string[] = [];
        @CommandHandler(ReserveStock)
        class Handler {
          handle(payload: PayloadOf<typeof ReserveStock>) {
            seen.push(payload.orderId);
          }
        }
        const own = createBus({ handlers: [Handler], logger: silentLogger });
        try {
          await own.send(ReserveStock, { orderId: 'o-1' });
          await own.start();
          await waitUntil(() => seen.length > 0);
          expect(seen).toEqual(['o-1']);
        } finally {
          await own.stop();
        }
      });
    });

    describe('when the payload does not match the schema', () => {
      it('throws MessageValidationError with the zod issues and sends nothing', async () => {
        bus = await createTestBus({ definitions: [PlaceOrder] });
        const error = await bus.send(PlaceOrder, { orderId: 'o-1', amount: -1 }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(MessageValidationError);
        expect((error as MessageValidationError).issues[0]?.path).toEqual(['amount']);
        expect(bus.sent).toHaveLength(0);
      });
    });

    describe('when given an event', () => {
      it('throws a HarrierError that names publish', async () => {
        bus = await createTestBus();
        const error = await bus
          .send(OrderPlaced as never, { orderId: 'x', amount: 1 } as never)
          .catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('wrong-kind');
        expect((error as Error).message).toContain(
          'send takes a command, but "test.OrderPlaced" is an event',
        );
        expect((error as Error).message).toContain('use publish');
      });
    });
  });

  describe('.execute', () => {
    describe('when a command handler returns a value', () => {
      it('resolves to the typed result', async () => {
        @CommandHandler(PlaceOrder)
        class Handler {
          handle() {
            return { accepted: true };
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        const result: { accepted: boolean } = await bus.execute(PlaceOrder, { orderId: 'o-1', amount: 1 });
        expect(result).toEqual({ accepted: true });
      });
    });

    describe('when a query handler answers', () => {
      it('resolves to its answer', async () => {
        @QueryHandler(GetTotal)
        class Handler {
          handle() {
            return 42;
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        expect(await bus.execute(GetTotal, {})).toBe(42);
      });
    });

    describe('when the bus was stopped', () => {
      it('throws bus-stopped without calling the handler', async () => {
        const { Handler, calls } = countingHandler();
        bus = await createTestBus({ handlers: [Handler] });
        await bus.stop();
        const error = await bus.execute(PlaceOrder, { orderId: 'o', amount: 1 }).catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('bus-stopped');
        expect(calls()).toBe(0);
      });
    });

    describe('when the handler records a command that no endpoint handles', () => {
      it('rejects with no-route and publishes none of what it recorded', async () => {
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
            ctx.send(ReserveStock, { orderId: payload.orderId });
            return { accepted: true };
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        const error = await bus.execute(PlaceOrder, { orderId: 'o', amount: 1 }).catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('no-route');
        expect(bus.published).toHaveLength(0);
      });
    });

    describe('when the payload does not match the schema', () => {
      it('throws MessageValidationError without calling the handler', async () => {
        const { Handler, calls } = countingHandler();
        bus = await createTestBus({ handlers: [Handler] });
        const error = await bus.execute(PlaceOrder, { orderId: 'o', amount: -1 }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(MessageValidationError);
        expect(calls()).toBe(0);
      });
    });

    describe('when the handler records an event', () => {
      it('encodes only the recorded event, not the executed command, which never leaves the process', async () => {
        const encoded: string[] = [];
        let seen: Envelope | undefined;
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
            seen = ctx.envelope;
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
            return { accepted: true };
          }
        }
        bus = await createTestBus({
          handlers: [Handler],
          encode: (envelope) => {
            encoded.push(envelope.type);
            return encodeEnvelope(envelope);
          },
        });
        await bus.execute(PlaceOrder, { orderId: 'o-3', amount: 2 });
        expect(encoded).toEqual([OrderPlaced.type]);
        expect(seen).toMatchObject({ type: PlaceOrder.type, payload: { orderId: 'o-3', amount: 2 } });
        expect(isUuidV7(seen?.id ?? '')).toBe(true);
        expect(seen?.meta.occurredAt).toBe(new Date(bus.clock.now()).toISOString());
      });
    });

    describe('when no handler is registered', () => {
      it('throws HandlerNotFoundError naming the decorator', async () => {
        bus = await createTestBus();
        const error = await bus.execute(PlaceOrder, { orderId: 'o', amount: 1 }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(HandlerNotFoundError);
        expect((error as Error).message).toContain('@CommandHandler(PlaceOrder)');
      });
    });
  });

  describe('unit of work', () => {
    describe('when the command handler succeeds', () => {
      it('publishes the recorded events in one batch with correlation and causation', async () => {
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
            ctx.send(ReserveStock, { orderId: payload.orderId });
            return { accepted: true };
          }
        }
        @CommandHandler(ReserveStock)
        class ReserveStockHandler {
          handle(): void {}
        }
        bus = await createTestBus({ handlers: [Handler, ReserveStockHandler] });
        const id = await bus.send(
          PlaceOrder,
          { orderId: 'o-1', amount: 2 },
          { correlationId: '0190a0b0-0000-7000-8000-000000000001' },
        );
        await bus.whenIdle();
        const [event] = bus.messagesOf(OrderPlaced);
        const [command] = bus.messagesOf(ReserveStock);
        expect(event?.payload).toEqual({ orderId: 'o-1', amount: 2 });
        expect(event?.envelope.meta.correlationId).toBe('0190a0b0-0000-7000-8000-000000000001');
        expect(event?.envelope.meta.causationId).toBe(id);
        expect(command?.envelope.meta.causationId).toBe(id);
      });
    });

    describe('when the command handler sends a command that no endpoint handles', () => {
      it('publishes none of its batch and dead-letters the delivery with the no-route error', async () => {
        @CommandHandler(PlaceOrder, { retry: { attempts: 2 } })
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
            ctx.send(ReserveStock, { orderId: payload.orderId });
            return { accepted: true };
          }
        }
        @EventHandler(OrderPlaced)
        class Audit {
          handle(): void {}
        }
        bus = await createTestBus({ handlers: [Handler, Audit] });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 2 });
        await bus.whenIdle();
        expect(bus.messagesOf(OrderPlaced)).toHaveLength(0);
        expect(bus.messagesOf(ReserveStock)).toHaveLength(0);
        const { records } = await bus.deadLetters.list();
        expect(records).toHaveLength(1);
        expect(records[0]?.reason).toBe('handler-failed');
        expect(records[0]?.error.code).toBe('no-route');
        expect(records[0]?.error.message).toContain('@CommandHandler(ReserveStock)');
      });
    });

    describe('when the command handler sends a command that no endpoint handles, on a bus with an event log', () => {
      it('appends none of its events to the log', async () => {
        @CommandHandler(PlaceOrder, { retry: { attempts: 1 } })
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
            ctx.send(ReserveStock, { orderId: payload.orderId });
            return { accepted: true };
          }
        }
        const log = new InMemoryEventLog({ topics: [{ name: 'test', partitions: 1 }] });
        let deadLettered = 0;
        const logged = createBus({
          handlers: [Handler],
          eventLog: log,
          logger: silentLogger,
          hooks: {
            onDeadLettered: () => {
              deadLettered++;
            },
          },
        });
        await logged.start();
        await logged.send(PlaceOrder, { orderId: 'o-1', amount: 2 });
        await expect.poll(() => deadLettered).toBe(1);
        expect(await log.endOffset('test', 0)).toBe(0);
        await logged.stop();
      });
    });

    describe('when the command handler throws', () => {
      it('publishes none of the recorded events', async () => {
        @CommandHandler(PlaceOrder, { retry: { attempts: 3 } })
        class Handler {
          handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
            ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
            throw new Error('database down');
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 2 });
        await bus.whenIdle();
        expect(bus.messagesOf(OrderPlaced)).toHaveLength(0);
        expect(await bus.deadLetters.count()).toBe(1);
      });
    });
  });

  describe('retries', () => {
    describe('when a handler fails twice then succeeds', () => {
      it('handles the message on the third attempt after exponential backoff', async () => {
        const attempts: { attempt: number; at: number }[] = [];
        @CommandHandler(PlaceOrder, { retry: { immediate: 0, backoff: { baseMs: 1000, jitter: 0 } } })
        class Handler {
          handle(_: unknown, ctx: MessageContext) {
            attempts.push({ attempt: ctx.attempt, at: bus!.clock.now() });
            if (ctx.attempt < 3) throw new Error(`flaky ${ctx.attempt}`);
            return { accepted: true };
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
        await bus.whenIdle();
        expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
        expect(attempts[1]!.at - attempts[0]!.at).toBe(1000);
        expect(attempts[2]!.at - attempts[1]!.at).toBe(2000);
        expect(await bus.deadLetters.count()).toBe(0);
      });
    });

    describe('when a handler always fails', () => {
      it('dead-letters after the last attempt with the error history', async () => {
        @CommandHandler(PlaceOrder, { retry: { attempts: 4 } })
        class Handler {
          handle(_: unknown, ctx: MessageContext): never {
            throw new Error(`boom ${ctx.attempt}`);
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        const id = await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
        await bus.whenIdle();
        const { records } = await bus.deadLetters.list();
        expect(records).toHaveLength(1);
        const record = records[0]!;
        expect(record.messageId).toBe(id);
        expect(record.reason).toBe('handler-failed');
        expect(record.handler).toBe('Handler');
        expect(record.attemptCount).toBe(4);
        expect(record.attempts.map((a) => a.error.message)).toEqual(['boom 1', 'boom 2', 'boom 3', 'boom 4']);
        expect(JSON.parse(record.envelope)).toMatchObject({ id, type: PlaceOrder.type });
      });
    });

    describe('when a handler throws UnrecoverableError', () => {
      it('dead-letters at once without retrying', async () => {
        let calls = 0;
        @CommandHandler(PlaceOrder)
        class Handler {
          handle(): never {
            calls++;
            throw new UnrecoverableError('order does not exist');
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
        await bus.whenIdle();
        expect(calls).toBe(1);
        expect((await bus.deadLetters.list()).records[0]?.attemptCount).toBe(1);
      });
    });

    describe('when the retry policy calls an error permanent', () => {
      it('dead-letters at once', async () => {
        class NotAllowed extends Error {}
        let calls = 0;
        @CommandHandler(PlaceOrder, { retry: { permanent: (e) => e instanceof NotAllowed } })
        class Handler {
          handle(): never {
            calls++;
            throw new NotAllowed('no');
          }
        }
        bus = await createTestBus({ handlers: [Handler] });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
        await bus.whenIdle();
        expect(calls).toBe(1);
        expect(await bus.deadLetters.count()).toBe(1);
      });
    });
  });

  describe('fan-out', () => {
    describe('when one of three subscriptions keeps failing', () => {
      it('runs each of the others once and dead-letters only the failing one', async () => {
        const calls = { a: 0, b: 0, failing: 0 };
        @EventHandler(OrderPlaced)
        class A {
          handle() {
            calls.a++;
          }
        }
        @EventHandler(OrderPlaced)
        class B {
          handle() {
            calls.b++;
          }
        }
        @EventHandler(OrderPlaced, { retry: { attempts: 3 } })
        class Failing {
          handle(): never {
            calls.failing++;
            throw new Error('always');
          }
        }
        bus = await createTestBus({ handlers: [A, Failing, B] });
        await bus.publish(OrderPlaced, { orderId: 'o-1', amount: 1 });
        await bus.whenIdle();
        expect(calls).toEqual({ a: 1, b: 1, failing: 3 });
        const { records } = await bus.deadLetters.list();
        expect(records.map((r) => r.handler)).toEqual(['Failing']);
      });
    });

    describe('when the same event id is published twice', () => {
      it('delivers it once per subscription', async () => {
        let calls = 0;
        @EventHandler(OrderPlaced)
        class A {
          handle() {
            calls++;
          }
        }
        bus = await createTestBus({ handlers: [A] });
        const id = await bus.publish(OrderPlaced, { orderId: 'o-1', amount: 1 });
        await bus.publish(OrderPlaced, { orderId: 'o-1', amount: 1 }, { id });
        await bus.whenIdle();
        expect(calls).toBe(1);
      });
    });
  });

  describe('bad input', () => {
    const push = (bus: TestBus, body: string, type = PlaceOrder.type) =>
      bus.broker.publish({ id: '0190a0b0-0000-7000-8000-0000000000aa', kind: 'command', type, body });

    it.each([
      ['malformed', 'not json at all {'],
      ['malformed', JSON.stringify({ hello: 'world' })],
    ])('dead-letters bytes that are not an envelope as %s', async (reason, body) => {
      @CommandHandler(PlaceOrder)
      class Handler {
        handle() {
          return { accepted: true };
        }
      }
      bus = await createTestBus({ handlers: [Handler] });
      await push(bus, body);
      await bus.whenIdle();
      const [record] = (await bus.deadLetters.list()).records;
      expect(record?.reason).toBe(reason);
      expect(record?.envelope).toBe(body);
    });

    it('dead-letters a payload that violates the schema as validation-failed, and keeps running', async () => {
      let handled = 0;
      @CommandHandler(PlaceOrder)
      class Handler {
        handle() {
          handled++;
          return { accepted: true };
        }
      }
      bus = await createTestBus({ handlers: [Handler] });
      const bad = encodeEnvelope({
        v: 1,
        id: '0190a0b0-0000-7000-8000-0000000000ab',
        kind: 'command',
        type: PlaceOrder.type,
        payload: { orderId: 7 },
        meta: {
          correlationId: '0190a0b0-0000-7000-8000-0000000000ab',
          occurredAt: new Date().toISOString(),
          headers: {},
        },
      });
      await push(bus, bad);
      await bus.send(PlaceOrder, { orderId: 'ok', amount: 1 });
      await bus.whenIdle();
      const [record] = (await bus.deadLetters.list()).records;
      expect(record?.reason).toBe('validation-failed');
      expect(record?.error.message).toContain('orderId');
      expect(handled).toBe(1);
    });

    it('dead-letters an unknown type as unknown-type', async () => {
      const Other = defineCommand('test.Other', { schema: PlaceOrder.schema });
      @CommandHandler(PlaceOrder)
      class Handler {
        handle() {
          return { accepted: true };
        }
      }
      bus = await createTestBus({ handlers: [Handler] });
      const envelope = encodeEnvelope({
        v: 1,
        id: '0190a0b0-0000-7000-8000-0000000000ac',
        kind: 'command',
        type: Other.type,
        payload: { orderId: 'x', amount: 1 },
        meta: {
          correlationId: '0190a0b0-0000-7000-8000-0000000000ac',
          occurredAt: new Date().toISOString(),
          headers: {},
        },
      });
      await push(bus, envelope);
      await bus.whenIdle();
      expect((await bus.deadLetters.list()).records[0]?.reason).toBe('unknown-type');
    });

    it('dead-letters an envelope above maxEnvelopeBytes as too-large', async () => {
      @CommandHandler(PlaceOrder)
      class Handler {
        handle() {
          return { accepted: true };
        }
      }
      bus = await createTestBus({ handlers: [Handler], maxEnvelopeBytes: 512 });
      await push(bus, 'x'.repeat(600));
      await bus.whenIdle();
      expect((await bus.deadLetters.list()).records[0]?.reason).toBe('too-large');
    });
  });

  describe('middleware and hooks', () => {
    it('runs before/around/after in order and reports handled, retrying and dead-lettered', async () => {
      const trace: string[] = [];
      const middleware: Middleware[] = [
        {
          name: 'outer',
          before: () => void trace.push('outer.before'),
          after: (_c, o) => void trace.push(`outer.after:${o.ok}`),
        },
        {
          name: 'inner',
          around: async (_c, next) => {
            trace.push('inner.around>');
            const r = await next();
            trace.push('inner.around<');
            return r;
          },
        },
      ];
      const hooks: string[] = [];
      @CommandHandler(PlaceOrder, { retry: { attempts: 2 } })
      class Handler {
        handle(p: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
          trace.push('handle');
          if (p.orderId === 'bad' || ctx.attempt === 1) throw new Error('x');
          return { accepted: true };
        }
      }
      bus = await createTestBus({
        handlers: [Handler],
        middleware,
        hooks: {
          onHandled: (e) => hooks.push(`handled:${e.attempt}`),
          onRetrying: (e) => hooks.push(`retrying:${e.attempt}`),
          onDeadLettered: (e) => hooks.push(`dead:${e.record.reason}`),
        },
      });
      await bus.send(PlaceOrder, { orderId: 'good', amount: 1 });
      await bus.whenIdle();
      expect(trace).toEqual([
        'outer.before',
        'inner.around>',
        'handle',
        'outer.after:false',
        'outer.before',
        'inner.around>',
        'handle',
        'inner.around<',
        'outer.after:true',
      ]);
      await bus.send(PlaceOrder, { orderId: 'bad', amount: 1 });
      await bus.whenIdle();
      expect(hooks).toEqual(['retrying:1', 'handled:2', 'retrying:1', 'dead:handler-failed']);
    });
  });

  describe('dependency injection', () => {
    it('resolves each message in its own child container with the context bound', async () => {
      @injectable()
      class RequestInfo {
        constructor(@inject(HarrierTokens.MessageContext) readonly ctx: MessageContext) {}
      }
      @injectable()
      class Repo {
        readonly saved: string[] = [];
      }
      const instances = new Set<unknown>();
      const seen: string[] = [];
      @injectable()
      @CommandHandler(PlaceOrder)
      class Handler {
        constructor(
          @inject(RequestInfo) private readonly info: RequestInfo,
          @inject(Repo) private readonly repo: Repo,
        ) {}
        handle(p: PayloadOf<typeof PlaceOrder>) {
          instances.add(this.info);
          seen.push(`${p.orderId}:${this.info.ctx.messageId}`);
          this.repo.saved.push(p.orderId);
          return { accepted: true };
        }
      }
      const container = new Container();
      container.bind(Repo).toSelf().inSingletonScope();
      bus = await createTestBus({ handlers: [Handler], container, messageScope: { scoped: [RequestInfo] } });
      const a = await bus.send(PlaceOrder, { orderId: 'a', amount: 1 });
      const b = await bus.send(PlaceOrder, { orderId: 'b', amount: 1 });
      await bus.whenIdle();
      expect(seen.sort()).toEqual([`a:${a}`, `b:${b}`]);
      expect(instances.size).toBe(2);
      expect(container.get(Repo).saved.sort()).toEqual(['a', 'b']);
    });
  });

  describe('dependency injection without scoped services', () => {
    it('gives a handler that injects the message context its own child container per message', async () => {
      const seen: string[] = [];
      @injectable()
      @CommandHandler(PlaceOrder)
      class Handler {
        constructor(@inject(HarrierTokens.MessageContext) private readonly ctx: MessageContext) {}
        handle(p: PayloadOf<typeof PlaceOrder>) {
          seen.push(`${p.orderId}:${this.ctx.messageId}`);
          return { accepted: true };
        }
      }
      bus = await createTestBus({ handlers: [Handler] });
      const a = await bus.send(PlaceOrder, { orderId: 'a', amount: 1 });
      const b = await bus.send(PlaceOrder, { orderId: 'b', amount: 1 });
      await bus.whenIdle();
      expect(seen.sort()).toEqual([`a:${a}`, `b:${b}`]);
    });

    it('makes a fresh handler per message and one request-scoped service per message', async () => {
      let made = 0;
      @injectable()
      class UnitOfWorkService {
        readonly id = ++made;
      }
      const pairs: [number, number][] = [];
      const handlers = new Set<unknown>();
      @injectable()
      @CommandHandler(PlaceOrder)
      class Handler {
        constructor(
          @inject(UnitOfWorkService) private readonly first: UnitOfWorkService,
          @inject(UnitOfWorkService) private readonly second: UnitOfWorkService,
        ) {}
        handle() {
          handlers.add(this);
          pairs.push([this.first.id, this.second.id]);
          return { accepted: true };
        }
      }
      const container = new Container();
      container.bind(UnitOfWorkService).toSelf().inRequestScope();
      bus = await createTestBus({ handlers: [Handler], container });
      await bus.send(PlaceOrder, { orderId: 'a', amount: 1 });
      await bus.send(PlaceOrder, { orderId: 'b', amount: 1 });
      await bus.whenIdle();
      expect(handlers.size).toBe(2);
      expect(pairs.map(([x, y]) => x === y)).toEqual([true, true]);
      expect(new Set(pairs.map(([x]) => x)).size).toBe(2);
    });
  });

  describe('start-up', () => {
    it('fails fast on two handlers for one command', () => {
      @CommandHandler(PlaceOrder)
      class One {
        handle() {
          return { accepted: true };
        }
      }
      @CommandHandler(PlaceOrder)
      class Two {
        handle() {
          return { accepted: true };
        }
      }
      expect(() => createBus({ handlers: [One, Two] })).toThrow(DuplicateHandlerError);
    });

    it('fails fast on a handler for something that is not a definition', () => {
      @CommandHandler(undefined as never)
      class Broken {
        handle() {
          return undefined;
        }
      }
      expect(() => createBus({ handlers: [Broken] })).toThrow(
        /not a message definition: create it with defineCommand/,
      );
    });

    it('fails fast on a definition of another kind, naming both kinds in plain English', () => {
      @QueryHandler(OrderPlaced as never)
      class Misplaced {
        handle() {
          return 1;
        }
      }
      expect(() => createBus({ handlers: [Misplaced] })).toThrow(
        '@QueryHandler on Misplaced takes "test.OrderPlaced", an event; @QueryHandler takes queries only',
      );
    });

    it('fails fast on an undecorated class', () => {
      class Plain {
        handle() {
          return undefined;
        }
      }
      expect(() => createBus({ handlers: [Plain] })).toThrow(/has no handler decorator/);
    });
  });

  describe('.schedule', () => {
    it('delivers no sooner than the delay', async () => {
      const at: number[] = [];
      @CommandHandler(ReserveStock)
      class Handler {
        handle() {
          at.push(bus!.clock.now());
        }
      }
      bus = await createTestBus({ handlers: [Handler] });
      const start = bus.clock.now();
      await bus.schedule(ReserveStock, { orderId: 'o' }, { delayMs: 5000 });
      await bus.whenIdle({ includeDelayed: false });
      expect(at).toEqual([]);
      await bus.whenIdle();
      expect(at).toEqual([start + 5000]);
    });

    it('refuses a command that no endpoint handles with no-route', async () => {
      bus = await createTestBus({ definitions: [ReserveStock] });
      const error = await bus
        .schedule(ReserveStock, { orderId: 'o' }, { delayMs: 5000 })
        .catch((e: unknown) => e);
      expect(HarrierError.is(error) && error.code).toBe('no-route');
      expect(bus.sent).toHaveLength(0);
    });

    it('resolves to the message id, which is the schedule id', async () => {
      bus = await createTestBus({ handlers: [countingHandler().Handler] });
      const id = await bus.schedule(PlaceOrder, { orderId: 'o', amount: 1 }, { delayMs: 5000 });
      expect(isUuidV7(id)).toBe(true);
      expect(bus.sent.map((m) => m.id)).toEqual([id]);
    });
  });

  describe('.cancelScheduled', () => {
    it('cancels a scheduled command before its time: it never runs, and resolves to true', async () => {
      const { Handler, calls } = countingHandler();
      bus = await createTestBus({ handlers: [Handler] });
      const cancelled = await bus.schedule(PlaceOrder, { orderId: 'a', amount: 1 }, { delayMs: 5000 });
      await bus.schedule(PlaceOrder, { orderId: 'b', amount: 1 }, { delayMs: 6000 });

      expect(await bus.cancelScheduled(cancelled)).toBe(true);

      await bus.whenIdle();
      expect(calls()).toBe(1);
      expect(await bus.cancelScheduled(cancelled)).toBe(false);
    });

    it('cancels a scheduled event in every subscription', async () => {
      const handled: string[] = [];
      @EventHandler(OrderPlaced)
      class Mailer {
        handle() {
          handled.push('mailer');
        }
      }
      @EventHandler(OrderPlaced)
      class Ledger {
        handle() {
          handled.push('ledger');
        }
      }
      bus = await createTestBus({ handlers: [Mailer, Ledger] });
      const id = await bus.schedule(OrderPlaced, { orderId: 'o', amount: 1 }, { delayMs: 5000 });

      expect(await bus.cancelScheduled(id)).toBe(true);

      await bus.whenIdle();
      expect(handled).toEqual([]);
    });

    it('resolves to false for a message already handled, and for an unknown id', async () => {
      const { Handler, calls } = countingHandler();
      bus = await createTestBus({ handlers: [Handler] });
      const id = await bus.schedule(PlaceOrder, { orderId: 'o', amount: 1 }, { delayMs: 5000 });
      await bus.whenIdle();

      expect(await bus.cancelScheduled(id)).toBe(false);
      expect(await bus.cancelScheduled('no-such-message')).toBe(false);
      expect(calls()).toBe(1);
    });

    it('lets the id be scheduled again after a cancel', async () => {
      const { Handler, calls } = countingHandler();
      bus = await createTestBus({ handlers: [Handler] });
      const id = await bus.schedule(PlaceOrder, { orderId: 'o', amount: 1 }, { delayMs: 5000 });
      expect(await bus.cancelScheduled(id)).toBe(true);

      await bus.schedule(PlaceOrder, { orderId: 'o', amount: 1 }, { delayMs: 1000, id });

      await bus.whenIdle();
      expect(calls()).toBe(1);
    });

    it('refuses an id that is not a non-empty string with invalid-argument', async () => {
      bus = await createTestBus({ handlers: [countingHandler().Handler] });
      for (const id of ['', 42]) {
        const error = await bus.cancelScheduled(id as string).catch((e: unknown) => e);
        expect(HarrierError.is(error) && error.code).toBe('invalid-argument');
      }
    });

    it('throws not-supported on a broker that cannot cancel, naming the brokers that can', async () => {
      class NoCancelBroker extends InMemoryBroker {
        override capabilities() {
          return { ...super.capabilities(), cancelScheduled: false };
        }
      }
      const plain = createBus({ broker: new NoCancelBroker(), logger: silentLogger });
      const error = await plain.cancelScheduled('some-id').catch((e: unknown) => e);
      expect(HarrierError.is(error) && error.code).toBe('not-supported');
      expect((error as Error).message).toMatch(/InMemoryBroker, BullMqBroker .* PostgresBroker/);
      await plain.stop();
    });
  });

  describe('.stop', () => {
    it('lets an in-flight handler finish within the grace period', async () => {
      let finished = false;
      let release!: () => void;
      const started = new Promise<void>((resolve) => (release = resolve));
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      @CommandHandler(ReserveStock)
      class Handler {
        async handle() {
          release();
          await gate;
          finished = true;
        }
      }
      bus = await createTestBus({ handlers: [Handler] });
      await bus.send(ReserveStock, { orderId: 'o' });
      await started;
      let stopped = false;
      const stopping = bus.stop({ gracePeriodMs: 5000, closeBroker: false }).then(() => (stopped = true));
      await new Promise((resolve) => setImmediate(resolve));
      expect(stopped).toBe(false);
      open();
      await stopping;
      expect(finished).toBe(true);
      expect(bus.broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
    });

    it('releases a handler still running after the grace period for redelivery and aborts its signal', async () => {
      let signal: AbortSignal | undefined;
      let release!: () => void;
      const started = new Promise<void>((resolve) => (release = resolve));
      @CommandHandler(ReserveStock)
      class Handler {
        async handle(_: unknown, ctx: MessageContext) {
          signal = ctx.signal;
          release();
          // Still running when the grace period ends; let go once the signal aborts.
          await new Promise((resolve) => {
            ctx.signal.addEventListener('abort', resolve, { once: true });
          });
        }
      }
      bus = await createTestBus({ handlers: [Handler] });
      await bus.send(ReserveStock, { orderId: 'o' });
      await started;
      await bus.stop({ gracePeriodMs: 20, closeBroker: false });
      expect(signal?.aborted).toBe(true);
      expect(bus.broker.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    });
  });
});
