import 'reflect-metadata';
import {
  Inject,
  Injectable,
  Module,
  Scope,
  type INestApplicationContext,
  type ModuleMetadata,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  HarrierError,
  HarrierTokens,
  On,
  Projection,
  QueryHandler,
  Saga,
  StartedBy,
  defineCommand,
  defineEvent,
  defineQuery,
  silentLogger,
  uuidv7,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import {
  HarrierModule,
  InjectBus,
  InjectMessageContext,
  MessageBus as MessageBusToken,
  type HarrierModuleOptions,
} from '../../../src/nestjs/index.js';

const PlaceOrder = defineCommand('nest.PlaceOrder', { schema: z.object({ orderId: z.string() }) });
const ShipOrder = defineCommand('nest.ShipOrder', { schema: z.object({ orderId: z.string() }) });
const OrderPlaced = defineEvent('nest.OrderPlaced', { schema: z.object({ orderId: z.string() }) });
const Ping = defineQuery('nest.Ping', { schema: z.object({}), result: z.string() });

/** What handlers saw, in order; `until` waits for a number of entries (5 s at most). */
@Injectable()
class Journal {
  readonly entries: Record<string, unknown>[] = [];
  readonly #waiters: { count: number; resolve: () => void }[] = [];

  add(entry: Record<string, unknown>): void {
    this.entries.push(entry);
    for (const waiter of [...this.#waiters]) {
      if (this.entries.length >= waiter.count) {
        this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  }

  of(what: string): Record<string, unknown>[] {
    return this.entries.filter((entry) => entry.what === what);
  }

  until(count: number): Promise<void> {
    if (this.entries.length >= count) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`the journal has ${this.entries.length} entries, not ${count}, after 5 s`));
      }, 5_000);
      this.#waiters.push({
        count,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }
}

@Module({ providers: [Journal], exports: [Journal] })
class JournalModule {}

/** A Nest service a handler depends on. */
@Injectable()
class Orders {
  accept(orderId: string): string {
    return `accepted ${orderId}`;
  }
}

@Injectable()
@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  constructor(
    @Inject(Orders) private readonly orders: Orders,
    @Inject(Journal) private readonly journal: Journal,
  ) {}

  handle(command: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    this.journal.add({ what: 'placed', result: this.orders.accept(command.orderId), instance: this });
    ctx.publish(OrderPlaced, { orderId: command.orderId });
  }
}

@Injectable()
@EventHandler(OrderPlaced)
class OrderPlacedHandler {
  constructor(@Inject(Journal) private readonly journal: Journal) {}

  handle(event: PayloadOf<typeof OrderPlaced>, ctx: MessageContext): void {
    this.journal.add({ what: 'event', orderId: event.orderId, correlationId: ctx.correlationId });
  }
}

const apps: INestApplicationContext[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

/** A Nest application context of a root module with `metadata` and the bus of `options`. */
async function appWith(
  metadata: ModuleMetadata,
  options: HarrierModuleOptions = {},
): Promise<INestApplicationContext> {
  @Module({
    ...metadata,
    imports: [
      HarrierModule.forRoot({ logger: silentLogger, ...options }),
      JournalModule,
      ...(metadata.imports ?? []),
    ],
  })
  class AppModule {}
  // Nest types its options as a class with only optional fields; its documented call is a literal.
  // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
  apps.push(app);
  return app;
}

describe('HarrierModule', () => {
  describe('.forRoot', () => {
    it('starts the bus on bootstrap and calls handlers on the instances Nest made, with their injected services', async () => {
      const app = await appWith({ providers: [Orders, PlaceOrderHandler, OrderPlacedHandler] });
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      const journal = app.get(Journal);
      const correlationId = uuidv7();
      const id = await bus.send(PlaceOrder, { orderId: 'o-1' }, { correlationId });
      await journal.until(2);
      expect(id).toEqual(expect.any(String));
      expect(journal.of('placed')).toEqual([
        { what: 'placed', result: 'accepted o-1', instance: app.get(PlaceOrderHandler) },
      ]);
      expect(journal.of('event')).toEqual([{ what: 'event', orderId: 'o-1', correlationId }]);
    });

    it('calls a default-scoped handler on its one Nest instance for every message, as Nest does any singleton', async () => {
      const app = await appWith({ providers: [Orders, PlaceOrderHandler] }, { definitions: [OrderPlaced] });
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      const journal = app.get(Journal);
      await bus.send(PlaceOrder, { orderId: 'o-1' });
      await bus.send(PlaceOrder, { orderId: 'o-2' });
      await journal.until(2);
      const [first, second] = journal.of('placed');
      expect(first?.instance).toBe(second?.instance);
    });

    it('makes a request-scoped handler afresh for every message, and gives its request-scoped dependencies that message context', async () => {
      @Injectable({ scope: Scope.REQUEST })
      class MessageAudit {
        constructor(@InjectMessageContext() readonly ctx: MessageContext) {}
      }

      @Injectable({ scope: Scope.REQUEST })
      @CommandHandler(PlaceOrder)
      class ScopedPlaceOrder {
        constructor(
          @Inject(MessageAudit) private readonly audit: MessageAudit,
          @Inject(Journal) private readonly journal: Journal,
        ) {}

        handle(_command: unknown, ctx: MessageContext): void {
          this.journal.add({
            what: 'placed',
            instance: this,
            messageId: ctx.messageId,
            auditedId: this.audit.ctx.messageId,
          });
        }
      }

      const app = await appWith({ providers: [MessageAudit, ScopedPlaceOrder] });
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      const journal = app.get(Journal);
      const ids = [
        await bus.send(PlaceOrder, { orderId: 'o-1' }),
        await bus.send(PlaceOrder, { orderId: 'o-2' }),
      ];
      await journal.until(2);
      const placed = journal.of('placed');
      expect(new Set(placed.map((entry) => entry.instance)).size).toBe(2);
      expect(placed.map((entry) => entry.messageId).sort()).toEqual([...ids].sort());
      for (const entry of placed) expect(entry.auditedId).toBe(entry.messageId);
    });

    it('makes a default-scoped handler afresh for every message when it depends on a request-scoped provider (Nest scopes it too)', async () => {
      @Injectable({ scope: Scope.REQUEST })
      class PerMessage {}

      @Injectable()
      @CommandHandler(PlaceOrder)
      class ImplicitlyScoped {
        constructor(
          @Inject(PerMessage) private readonly perMessage: PerMessage,
          @Inject(Journal) private readonly journal: Journal,
        ) {}

        handle(): void {
          this.journal.add({ what: 'placed', instance: this, perMessage: this.perMessage });
        }
      }

      const app = await appWith({ providers: [PerMessage, ImplicitlyScoped] });
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      const journal = app.get(Journal);
      await bus.send(PlaceOrder, { orderId: 'o-1' });
      await bus.send(PlaceOrder, { orderId: 'o-2' });
      await journal.until(2);
      const placed = journal.of('placed');
      expect(new Set(placed.map((entry) => entry.instance)).size).toBe(2);
      expect(new Set(placed.map((entry) => entry.perMessage)).size).toBe(2);
    });

    it('makes a transient handler afresh for every message, execute included', async () => {
      @Injectable({ scope: Scope.TRANSIENT })
      @QueryHandler(Ping)
      class TransientPing {
        static made = 0;
        readonly n = ++TransientPing.made;

        handle(): string {
          return `pong ${this.n}`;
        }
      }

      const app = await appWith({ providers: [TransientPing] });
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      const first = await bus.execute(Ping, {});
      const second = await bus.execute(Ping, {});
      expect(first).toMatch(/^pong \d+$/);
      expect(second).not.toBe(first);
    });

    it('finds projections and sagas among the providers', async () => {
      @Injectable()
      @Projection('NestOrderCount')
      class OrderCount {
        constructor(@Inject(Journal) private readonly journal: Journal) {}

        @On(OrderPlaced)
        placed(event: PayloadOf<typeof OrderPlaced>): void {
          this.journal.add({ what: 'projected', orderId: event.orderId });
        }
      }

      @Injectable()
      @Saga('nest.Fulfilment', { state: z.object({ placed: z.boolean().default(false) }) })
      class Fulfilment {
        constructor(@Inject(Journal) private readonly journal: Journal) {}

        @StartedBy(OrderPlaced, { correlate: 'orderId' })
        placed(event: PayloadOf<typeof OrderPlaced>): void {
          this.journal.add({ what: 'saga', orderId: event.orderId });
        }
      }

      const app = await appWith({ providers: [OrderCount, Fulfilment] });
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      const journal = app.get(Journal);
      await bus.publish(OrderPlaced, { orderId: 'o-9' });
      await journal.until(2);
      expect(journal.of('projected')).toEqual([{ what: 'projected', orderId: 'o-9' }]);
      expect(journal.of('saga')).toEqual([{ what: 'saga', orderId: 'o-9' }]);
    });

    it('refuses the createBus options Nest provides instead, naming the Nest way', async () => {
      const options = { handlers: [PlaceOrderHandler] } as unknown as HarrierModuleOptions;
      await expect(appWith({ providers: [Orders, PlaceOrderHandler] }, options)).rejects.toThrow(
        'HarrierModule does not take handlers: list handler classes in the providers of a Nest module',
      );
    });

    it('refuses a handler that is a provider of two modules', async () => {
      @Module({ imports: [JournalModule], providers: [Orders, PlaceOrderHandler] })
      class FirstModule {}
      @Module({ imports: [JournalModule], providers: [Orders, PlaceOrderHandler] })
      class SecondModule {}

      const failure = await appWith({ imports: [FirstModule, SecondModule] }).catch(
        (error: unknown) => error,
      );
      expect(HarrierError.is(failure)).toBe(true);
      expect((failure as HarrierError).code).toBe('invalid-handler');
      expect((failure as Error).message).toContain(
        'PlaceOrderHandler is a provider of both FirstModule and SecondModule',
      );
    });
  });

  describe('the bus as a provider', () => {
    it('is injected by @InjectBus() and by the MessageBus class, and sends', async () => {
      @Injectable()
      class Checkout {
        constructor(
          @InjectBus() readonly bus: MessageBus,
          @Inject(MessageBusToken) readonly byClass: MessageBusToken,
        ) {}
      }

      const app = await appWith({ providers: [Orders, PlaceOrderHandler, OrderPlacedHandler, Checkout] });
      const checkout = app.get(Checkout);
      expect(checkout.bus).toBe(app.get(HarrierTokens.MessageBus));
      expect(checkout.byClass).toBe(checkout.bus);
      await checkout.byClass.send(PlaceOrder, { orderId: 'o-3' });
      await app.get(Journal).until(2);
      expect(app.get(Journal).of('event')).toHaveLength(1);
    });
  });

  describe('.forRootAsync', () => {
    it('makes the bus from the options its factory returns, with the providers it injects', async () => {
      @Injectable()
      class ConfigService {
        readonly #values: Record<string, string> = { ENDPOINT: 'billing' };

        getOrThrow(key: string): string {
          const value = this.#values[key];
          if (value === undefined) throw new Error(`${key} is not configured`);
          return value;
        }
      }
      @Module({ providers: [ConfigService], exports: [ConfigService] })
      class ConfigModule {}

      @Module({
        imports: [
          HarrierModule.forRootAsync({
            imports: [ConfigModule],
            inject: [ConfigService],
            useFactory: async (config: ConfigService) => {
              await Promise.resolve();
              return { endpoint: config.getOrThrow('ENDPOINT'), logger: silentLogger };
            },
          }),
          JournalModule,
        ],
        providers: [Orders, PlaceOrderHandler, OrderPlacedHandler],
      })
      class AppModule {}

      // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
      const app = await NestFactory.createApplicationContext(AppModule, {
        logger: false,
        abortOnError: false,
      });
      apps.push(app);
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      expect(bus.endpoint).toBe('billing');
      await bus.send(PlaceOrder, { orderId: 'o-4' });
      await app.get(Journal).until(2);
      expect(app.get(Journal).of('event')).toEqual([
        { what: 'event', orderId: 'o-4', correlationId: expect.any(String) as string },
      ]);
    });
  });

  describe('app.close()', () => {
    it('stops the bus, letting an in-flight handler finish and be acknowledged before close resolves', async () => {
      let openGate: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => {
        openGate = resolve;
      });

      @Injectable()
      @CommandHandler(ShipOrder)
      class SlowShipOrder {
        constructor(@Inject(Journal) private readonly journal: Journal) {}

        async handle(command: PayloadOf<typeof ShipOrder>): Promise<void> {
          this.journal.add({ what: 'started', orderId: command.orderId });
          await gate;
          this.journal.add({ what: 'finished', orderId: command.orderId });
        }
      }

      @Injectable()
      @QueryHandler(Ping)
      class PingHandler {
        handle(): string {
          return 'pong';
        }
      }

      /** What the hooks saw: a delivery is acknowledged before onHandled runs. */
      const settled: string[] = [];
      const app = await appWith(
        { providers: [SlowShipOrder, PingHandler] },
        {
          hooks: {
            onHandled: ({ handler }) => settled.push(`acked ${handler}`),
            onDeadLettered: ({ record }) => settled.push(`dead-lettered ${record.handler}`),
          },
        },
      );
      const journal = app.get(Journal);
      const bus = app.get<MessageBus>(HarrierTokens.MessageBus);
      await bus.send(ShipOrder, { orderId: 'o-5' });
      await journal.until(1);

      apps.splice(apps.indexOf(app), 1);
      let closed = false;
      const closing = app.close().then(() => {
        closed = true;
      });
      // stop() has begun once the bus refuses work (execute runs in-process: nothing is queued).
      for (;;) {
        const refused = await bus.execute(Ping, {}).then(
          () => undefined,
          (error: unknown) => error,
        );
        if (refused !== undefined) {
          expect((refused as HarrierError).code).toBe('bus-stopped');
          break;
        }
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      expect(closed).toBe(false);
      expect(journal.of('finished')).toEqual([]);

      openGate();
      await closing;
      expect(journal.of('finished')).toEqual([{ what: 'finished', orderId: 'o-5' }]);
      expect(settled).toEqual(['acked SlowShipOrder']);
    });
  });
});
