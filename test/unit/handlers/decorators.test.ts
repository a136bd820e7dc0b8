import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  HarrierError,
  On,
  Projection,
  QueryHandler,
  defineCommand,
  defineEvent,
  defineQuery,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import { getHandlerMetadata } from '../../../src/extend.js';

const PlaceOrder = defineCommand('decorators.PlaceOrder', { schema: z.object({ orderId: z.string() }) });
const ChargeCard = defineCommand('decorators.ChargeCard', { schema: z.object({ cardId: z.string() }) });
const OrderPlaced = defineEvent('decorators.OrderPlaced', { schema: z.object({ orderId: z.string() }) });
const CardCharged = defineEvent('decorators.CardCharged', { schema: z.object({ cardId: z.string() }) });
const GetOrder = defineQuery('decorators.GetOrder', {
  schema: z.object({ orderId: z.string() }),
  result: z.number(),
});

/** What a TC39 (standard) decorator receives as its second argument. */
function classContext(name: string): ClassDecoratorContext {
  return { kind: 'class', name, addInitializer: () => undefined, metadata: {} };
}

function methodContext(name: string): ClassMethodDecoratorContext {
  return {
    kind: 'method',
    name,
    static: false,
    private: false,
    access: { has: () => true, get: () => undefined },
    addInitializer: () => undefined,
    metadata: {},
  } as unknown as ClassMethodDecoratorContext;
}

/** Calls a decorator the TC39 way, as code compiled without experimentalDecorators does. */
function callStandard(decorator: unknown, value: unknown, context: unknown): unknown {
  try {
    (decorator as (value: unknown, context: unknown) => unknown)(value, context);
    return undefined;
  } catch (error) {
    return error;
  }
}

function expectUnsupported(error: unknown, decorator: string): void {
  expect(HarrierError.is(error) && error.code).toBe('unsupported-decorators');
  expect((error as Error).message).toContain(decorator);
  expect((error as Error).message).toContain('"experimentalDecorators": true');
  expect((error as Error).message).toContain('tsconfig.json');
}

describe('handler decorators', () => {
  describe('when called as standard (TC39) decorators', () => {
    it('@On throws unsupported-decorators naming the tsconfig flag', () => {
      class Totals {
        onPlaced(): void {}
      }
      // eslint-disable-next-line @typescript-eslint/unbound-method
      const error = callStandard(On(OrderPlaced), Totals.prototype.onPlaced, methodContext('onPlaced'));
      expectUnsupported(error, '@On on method onPlaced');
    });

    it('@Projection throws unsupported-decorators and records no metadata', () => {
      class Totals {}
      const error = callStandard(Projection('totals'), Totals, classContext('Totals'));
      expectUnsupported(error, '@Projection on class Totals');
      expect(getHandlerMetadata(Totals)).toBeUndefined();
    });

    it.each([
      ['@CommandHandler', CommandHandler(PlaceOrder)],
      ['@EventHandler', EventHandler(OrderPlaced)],
      ['@QueryHandler', QueryHandler(GetOrder)],
    ])('%s throws unsupported-decorators and records no metadata', (name, decorator) => {
      class Handler {
        handle(): void {}
      }
      const error = callStandard(decorator, Handler, classContext('Handler'));
      expectUnsupported(error, `${name} on class Handler`);
      expect(getHandlerMetadata(Handler)).toBeUndefined();
    });
  });

  describe('when called as experimental decorators', () => {
    it('records a projection and its @On methods', () => {
      @Projection('totals')
      class Totals {
        @On(OrderPlaced)
        onPlaced(_payload: PayloadOf<typeof OrderPlaced>): void {}
      }
      expect(getHandlerMetadata(Totals)).toMatchObject({
        kind: 'projection',
        name: 'totals',
        routes: [{ definition: OrderPlaced, method: 'onPlaced' }],
      });
    });
  });

  // These classes only need to compile (or not): `npm run typecheck` checks this file, and an
  // unused @ts-expect-error is itself an error, so each line below fails the typecheck as soon as
  // the decorator accepts a handler of the wrong payload.
  describe('types', () => {
    it('accept a handle that takes the payload of the definition', () => {
      @CommandHandler(PlaceOrder)
      class PlaceOrderHandler {
        handle(payload: PayloadOf<typeof PlaceOrder>, context: MessageContext): string {
          return `${payload.orderId} ${context.messageId}`;
        }
      }
      @QueryHandler(GetOrder)
      class GetOrderHandler {
        handle(payload: PayloadOf<typeof GetOrder>): number {
          return payload.orderId.length;
        }
      }
      @EventHandler([OrderPlaced, CardCharged])
      class Audit {
        handle(_payload: PayloadOf<typeof OrderPlaced> | PayloadOf<typeof CardCharged>): void {}
      }
      @CommandHandler(ChargeCard)
      class TakesNothing {
        handle(): void {}
      }
      @Projection('orders')
      class Orders {
        @On(OrderPlaced)
        onPlaced(_payload: PayloadOf<typeof OrderPlaced>, _context: MessageContext): void {}
      }
      expect([PlaceOrderHandler, GetOrderHandler, Audit, TakesNothing, Orders]).toHaveLength(5);
    });

    it('refuse a handle that takes the payload of another definition', () => {
      // @ts-expect-error handle takes ChargeCard's payload, not PlaceOrder's
      @CommandHandler(PlaceOrder)
      class WrongCommand {
        handle(_payload: PayloadOf<typeof ChargeCard>): void {}
      }
      // @ts-expect-error handle takes a field PlaceOrder does not have
      @CommandHandler(PlaceOrder)
      class ExtraField {
        handle(_payload: { orderId: string; quantity: number }): void {}
      }
      // @ts-expect-error handle takes ChargeCard's payload, not GetOrder's
      @QueryHandler(GetOrder)
      class WrongQuery {
        handle(payload: PayloadOf<typeof ChargeCard>): number {
          return payload.cardId.length;
        }
      }
      // @ts-expect-error handle takes CardCharged's payload, not OrderPlaced's
      @EventHandler(OrderPlaced)
      class WrongEvent {
        handle(_payload: PayloadOf<typeof CardCharged>): void {}
      }
      // @ts-expect-error handle takes only one of the two events it subscribes to
      @EventHandler([OrderPlaced, CardCharged])
      class OneOfTwo {
        handle(_payload: PayloadOf<typeof OrderPlaced>): void {}
      }
      // @ts-expect-error the context is typed for another payload
      @CommandHandler(PlaceOrder)
      class WrongContext {
        handle(_payload: PayloadOf<typeof PlaceOrder>, _context: MessageContext<{ cardId: string }>): void {}
      }
      @Projection('wrong')
      class WrongProjection {
        // @ts-expect-error the @On method takes CardCharged's payload, not OrderPlaced's
        @On(OrderPlaced)
        onPlaced(_payload: PayloadOf<typeof CardCharged>): void {}
      }
      expect([
        WrongCommand,
        ExtraField,
        WrongQuery,
        WrongEvent,
        OneOfTwo,
        WrongContext,
        WrongProjection,
      ]).toHaveLength(7);
    });
  });
});
