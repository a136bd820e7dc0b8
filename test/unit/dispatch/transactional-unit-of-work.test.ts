import 'reflect-metadata';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  InMemoryBroker,
  On,
  Projection,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import { Container } from 'inversify';
import {
  HandlerPipeline,
  HandlerRegistry,
  MessagePublisher,
  createContainerInvoker,
  prepareMessage,
  type TransactionalUnitOfWork,
  type UnitOfWorkCall,
  type UnitOfWorkResult,
} from '../../../src/extend.js';
import { InMemoryEventLog } from '../../../src/log/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';

const Pay = defineCommand('uow.Pay', { schema: z.object({ orderId: z.string() }), result: z.string() });
const Paid = defineEvent('uow.Paid', { schema: z.object({ orderId: z.string() }), partitionKey: 'orderId' });

/**
 * A unit of work that answers with a fixed result and records every call it got (what the handler
 * recorded by the time it would commit, and the call's facts).
 */
class ScriptedUnit implements TransactionalUnitOfWork {
  readonly name = 'scripted';
  readonly calls: {
    handler: string;
    kind: string;
    position: UnitOfWorkCall['position'];
    inProcess: boolean;
    recorded: string[];
  }[] = [];
  constructor(private readonly answer: (call: UnitOfWorkCall) => UnitOfWorkResult | 'throw') {}

  async run(call: UnitOfWorkCall): Promise<UnitOfWorkResult> {
    const answer = this.answer(call);
    if (answer === 'throw') throw new Error('commit failed');
    if (answer !== 'skipped') await call.run();
    this.calls.push({
      handler: call.handler,
      kind: call.handlerKind,
      position: call.position,
      inProcess: call.inProcess,
      recorded: call.context.recorded.map((p) => p.outgoing.type),
    });
    return answer;
  }
}

let payments = 0;
let paidSeen = 0;

@CommandHandler(Pay, { retry: { attempts: 2, backoff: { baseMs: 1, jitter: 0 } } })
class PayHandler {
  handle(payload: PayloadOf<typeof Pay>, ctx: MessageContext): string {
    payments++;
    ctx.publish(Paid, { orderId: payload.orderId });
    return `paid ${payload.orderId}`;
  }
}

@EventHandler(Paid)
class PaidHandler {
  handle(): void {
    paidSeen++;
  }
}

let bus: TestBus | MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
  payments = 0;
  paidSeen = 0;
});

describe('BusOptions.unitOfWork', () => {
  describe("when the unit answers 'ran'", () => {
    it('runs the handler in it, then publishes what it recorded', async () => {
      const unit = new ScriptedUnit(() => 'ran');
      const test = await createTestBus({ handlers: [PayHandler, PaidHandler], unitOfWork: unit });
      bus = test;
      await test.send(Pay, { orderId: 'o-1' });
      await test.whenIdle();
      expect(payments).toBe(1);
      expect(paidSeen).toBe(1);
      expect(unit.calls.map((c) => [c.handler, c.kind, c.recorded])).toEqual([
        ['PayHandler', 'command', ['uow.Paid']],
        ['PaidHandler', 'event', []],
      ]);
    });
  });

  describe("when the unit answers 'stored' (an outbox took the messages)", () => {
    it('publishes nothing itself and acks the delivery', async () => {
      const unit = new ScriptedUnit(() => 'stored');
      const test = await createTestBus({ handlers: [PayHandler, PaidHandler], unitOfWork: unit });
      bus = test;
      await test.send(Pay, { orderId: 'o-1' });
      await test.whenIdle();
      expect(payments).toBe(1);
      expect(test.messagesOf(Paid)).toHaveLength(0);
      expect(paidSeen).toBe(0);
      expect(test.broker.stats()).toMatchObject({ ready: 0, inFlight: 0 });
      expect(await test.deadLetters.count()).toBe(0);
    });
  });

  describe("when the unit answers 'skipped' (an inbox saw the message)", () => {
    it('acks the delivery without running the handler', async () => {
      let handled = 0;
      const unit = new ScriptedUnit(() => 'skipped');
      const test = await createTestBus({
        handlers: [PayHandler],
        unitOfWork: unit,
        hooks: {
          onHandled: () => {
            handled++;
          },
        },
      });
      bus = test;
      await test.send(Pay, { orderId: 'o-1' });
      await test.whenIdle();
      expect(payments).toBe(0);
      expect(handled).toBe(1);
      expect(test.messagesOf(Paid)).toHaveLength(0);
      expect(await test.deadLetters.count()).toBe(0);
    });
  });

  describe('when the unit throws (its commit failed)', () => {
    it('retries the delivery like a handler error, then dead-letters it', async () => {
      const unit = new ScriptedUnit(() => 'throw');
      const test = await createTestBus({ handlers: [PayHandler], unitOfWork: unit, logger: silentLogger });
      bus = test;
      await test.send(Pay, { orderId: 'o-1' });
      await test.whenIdle();
      const { records } = await test.deadLetters.list();
      expect(records.map((r) => [r.reason, r.attempts.length, r.error.message])).toEqual([
        ['handler-failed', 2, 'commit failed'],
      ]);
      expect(test.messagesOf(Paid)).toHaveLength(0);
    });
  });

  describe('.execute', () => {
    it('runs the handler in the unit, in process, and returns its result', async () => {
      const unit = new ScriptedUnit(() => 'stored');
      const test = await createTestBus({ handlers: [PayHandler], unitOfWork: unit });
      bus = test;
      expect(await test.execute(Pay, { orderId: 'o-2' })).toBe('paid o-2');
      expect(unit.calls).toMatchObject([{ handler: 'PayHandler', inProcess: true, recorded: ['uow.Paid'] }]);
      expect(test.messagesOf(Paid)).toHaveLength(0);
    });
  });

  describe('a projection fed by the event log', () => {
    it("runs in the unit with the event's log position; a skipped event still moves the checkpoint", async () => {
      const applied: string[] = [];
      @Projection('paid-orders')
      class PaidOrders {
        @On(Paid)
        onPaid(payload: PayloadOf<typeof Paid>): void {
          applied.push(payload.orderId);
        }
      }
      // The first event was applied before (its checkpoint committed with it): skip it.
      const unit = new ScriptedUnit((call) =>
        call.handlerKind === 'projection' && call.position?.offset === 0 ? 'skipped' : 'ran',
      );
      const logged = createBus({
        handlers: [PaidOrders],
        definitions: [Paid],
        eventLog: new InMemoryEventLog({ topics: [{ name: 'uow', partitions: 1 }] }),
        unitOfWork: unit,
        logger: silentLogger,
      });
      bus = logged;
      await logged.start();
      await logged.publish(Paid, { orderId: 'o-1' });
      await logged.publish(Paid, { orderId: 'o-2' });
      await logged.projections.whenCaughtUp();
      expect(applied).toEqual(['o-2']);
      expect(unit.calls.filter((c) => c.kind === 'projection').map((c) => c.position)).toEqual([
        { topic: 'uow', partition: 0, offset: 0, generation: 0 },
        { topic: 'uow', partition: 0, offset: 1, generation: 0 },
      ]);
      const [status] = await logged.projections.status();
      expect(status?.partitions[0]?.completed).toBe(1);
    });
  });
});

describe('HandlerPipeline with a unit of work', () => {
  describe("when a stop releases the delivery after the unit committed and answered 'ran'", () => {
    it('still publishes what the handler recorded (the inbox would skip the redelivery)', async () => {
      const broker = new InMemoryBroker();
      const registry = HandlerRegistry.build([PayHandler], [Paid]);
      let released = false;
      const unit: TransactionalUnitOfWork = {
        name: 'commits-then-released',
        run: async (call) => {
          await call.run();
          released = true; // the stop's grace ran out right after COMMIT
          return 'ran';
        },
      };
      const pipeline = new HandlerPipeline({
        registry,
        endpoint: 'app',
        invoke: createContainerInvoker(new Container()),
        publisher: new MessagePublisher({ broker, registry, requireCommandRoute: false }),
        unitOfWork: unit,
        logger: silentLogger,
      });
      const { outgoing: message } = prepareMessage(Pay, { orderId: 'o-9' }, {}, { now: Date.now() });
      const outcome = await pipeline.run({
        body: message.body,
        facts: {
          messageId: message.id,
          kind: 'command',
          type: Pay.type,
          endpoint: 'app',
          handler: undefined,
          attempt: 1,
          history: [],
          partitionKey: undefined,
        },
        signal: new AbortController().signal,
        abandoned: () => released,
      });
      expect(outcome.kind).toBe('handled');
      expect(outcome.kind === 'handled' ? outcome.outgoing.map((m) => m.type) : []).toEqual(['uow.Paid']);
    });
  });
});
