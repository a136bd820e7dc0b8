import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  MAX_ATTEMPT_HISTORY,
  type BrokerCapabilities,
  type Delivery,
  type ErrorInfo,
  type MessageBroker,
  type OutgoingMessage,
  type PendingDeadLetter,
  type QueueDepth,
  type SubscriptionSpec,
} from '../broker/message-broker.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { MessageKind } from '../messages/definition.js';
import { uuidv7 } from '../messages/uuid-v7.js';
import { expectCode, failureOf } from './expect-code.js';
import { commandQueue, subscriptionQueue } from '../broker/queue-names.js';

/** A broker made fresh for one conformance test, and how to tidy up after it. */
export interface MessageBrokerUnderTest {
  /** The broker to test; the suite closes it after each test. */
  readonly broker: MessageBroker;
  /** Runs after the broker is closed, e.g. to delete the test's Redis keys or close a connection. */
  readonly cleanup?: () => Promise<void>;
  /**
   * Makes another broker on the same system as `broker` (the same server and key prefix, the same
   * database), as a second process would, for the tests of a shared broker
   * ({@link BrokerCapabilities.shared}); the suite closes each one before `cleanup` runs. Those
   * tests skip, saying so, when it is left out.
   * @defaultValue none
   */
  readonly sibling?: () => Promise<MessageBroker>;
  /**
   * Makes the broker lose the holder of `delivery` as if the worker process holding it had died:
   * nothing will ever settle it, and the broker must deliver the message again as an unsettled end
   * (see `DeliveryFacts.unsettledEnds`). `InMemoryBroker`: `broker.abandon(delivery.id)`;
   * `BullMqBroker`: delete the job's lock, as a lease that ran out (test/contract/bullmq-broker.test.ts).
   * @defaultValue none: the tests of unsettled ends are skipped, saying so
   */
  readonly abandon?: (delivery: Delivery) => Promise<void>;
}

/**
 * A capability a conformance test needs: a boolean of {@link BrokerCapabilities} that must be true,
 * or `dedupeWindowMs`, which must be above 0.
 */
type Need = keyof BrokerCapabilities;

/** The needs among `needs` that `capabilities` lacks. */
function lacking(capabilities: BrokerCapabilities, needs: readonly Need[]): Need[] {
  return needs.filter((need) => {
    const value = capabilities[need];
    return typeof value === 'number' ? value <= 0 : !value;
  });
}

/** How long to wait for something that should happen, in ms. */
const ARRIVES_WITHIN_MS = 5_000;
/** How long to watch for something that must not happen, in ms. */
const QUIET_MS = 300;
/** Delay used for `deliverAt` and `retryAt`, in ms. */
const DELAY_MS = 400;
/** How long a retried ordered message holds its key while another key goes ahead. */
const HOLD_MS = 2_500;

/**
 * A body that is not an envelope and would be damaged by any re-encoding: brokers must pass bodies
 * through untouched, never parse them.
 */
const bodyFor = (label: string): string =>
  ` {"v":1,"not":"an envelope"\n\t${label} — ünïcödé 🚀 \\u0000 "quotes" 'single' \u0000 trailing  `;

/** The delivery matching `predicate`; fails the test when there is none. */
function pick(deliveries: readonly Delivery[], predicate: (delivery: Delivery) => boolean): Delivery {
  const found = deliveries.find(predicate);
  if (found === undefined)
    expect.fail(`No matching delivery among ${deliveries.map((d) => d.id).join(', ')}`);
  return found;
}

/** Polls `read` until `accept` holds or `timeoutMs` passes; returns the last value read. */
async function eventually<T>(
  read: () => Promise<T>,
  accept: (value: T) => boolean,
  timeoutMs = ARRIVES_WITHIN_MS,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (accept(value) || Date.now() >= until) return value;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The waiting, active and delayed messages of every queue in `depths`, added up. */
function totalOf(depths: readonly QueueDepth[]): Omit<QueueDepth, 'queue'> {
  return depths.reduce(
    (total, depth) => ({
      waiting: total.waiting + depth.waiting,
      active: total.active + depth.active,
      delayed: total.delayed + depth.delayed,
    }),
    { waiting: 0, active: 0, delayed: 0 },
  );
}

/** True for a stale-delivery HarrierError (of any installed copy), with exactly that code. */
const isStale = (error: unknown): boolean =>
  HarrierError.is(error, 'stale-delivery') && error.code === 'stale-delivery';

/**
 * One long-lived receiver of an endpoint that tests pull deliveries from, one at a time, with a
 * timeout; a pull that times out stays pending, so a late delivery is returned by the next pull.
 */
class Inbox {
  readonly #controller = new AbortController();
  readonly #iterator: AsyncIterator<Delivery>;
  #pending: Promise<IteratorResult<Delivery>> | undefined;

  constructor(
    broker: MessageBroker,
    readonly endpoint: string,
    prefetch?: number,
  ) {
    const options = { endpoint, signal: this.#controller.signal };
    const receiver = broker.receiver(prefetch === undefined ? options : { ...options, prefetch });
    this.#iterator = receiver[Symbol.asyncIterator]();
  }

  /** The next delivery; fails the test if none arrives within `timeoutMs`. */
  async next(timeoutMs = ARRIVES_WITHIN_MS): Promise<Delivery> {
    const result = await this.#pull(timeoutMs);
    if (result === 'timeout') {
      throw new Error(`No delivery to endpoint "${this.endpoint}" within ${timeoutMs} ms`);
    }
    if (result.done === true) throw new Error(`The receiver of endpoint "${this.endpoint}" ended`);
    return result.value;
  }

  /** The next `count` deliveries, in arrival order. */
  async take(count: number): Promise<Delivery[]> {
    const deliveries: Delivery[] = [];
    for (let i = 0; i < count; i++) deliveries.push(await this.next());
    return deliveries;
  }

  /** Fails the test if a delivery arrives within `ms`. */
  async expectNothingWithin(ms = QUIET_MS): Promise<void> {
    const result = await this.#pull(ms);
    if (result !== 'timeout' && result.done !== true) {
      this.#pending = undefined;
      expect.fail(
        `Endpoint "${this.endpoint}" got an unexpected delivery of ${String(result.value.facts.type)} (handler ${String(result.value.facts.handler)}, attempt ${result.value.facts.attempt})`,
      );
    }
  }

  /** True once the receiver has ended within `timeoutMs`; false if it is still open then. */
  async ends(timeoutMs = ARRIVES_WITHIN_MS): Promise<boolean> {
    const result = await this.#pull(timeoutMs);
    if (result === 'timeout') return false;
    if (result.done !== true) {
      expect.fail(
        `Endpoint "${this.endpoint}" got a delivery of ${String(result.value.facts.type)} instead of ending`,
      );
    }
    return true;
  }

  /** Aborts the receiver's signal. */
  abort(): void {
    this.#controller.abort();
  }

  /** Aborts the receiver and waits (bounded) for its iterator to finish. */
  async stop(): Promise<void> {
    this.abort();
    if (this.#pending !== undefined) await this.#pull(ARRIVES_WITHIN_MS);
  }

  async #pull(timeoutMs: number): Promise<IteratorResult<Delivery> | 'timeout'> {
    this.#pending ??= this.#iterator.next();
    const pending = this.#pending;
    const timeout = new AbortController();
    const timer = setTimeout(() => {
      timeout.abort();
    }, timeoutMs);
    try {
      const result = await Promise.race([
        pending,
        new Promise<'timeout'>((resolve) => {
          timeout.signal.addEventListener(
            'abort',
            () => {
              resolve('timeout');
            },
            { once: true },
          );
        }),
      ]);
      if (result !== 'timeout') this.#pending = undefined;
      return result;
    } finally {
      clearTimeout(timer);
      timeout.abort();
    }
  }
}

/** What one test works with: a fresh broker and unique names. */
class Fixture {
  readonly #suffix = randomUUID().replaceAll('-', '').slice(0, 12);
  readonly #inboxes: Inbox[] = [];
  readonly #siblings: MessageBroker[] = [];
  /** What `commands`, `orderedCommands` and `events` registered, by endpoint. */
  readonly #registered = new Map<string, SubscriptionSpec[]>();
  #closed = false;

  constructor(
    readonly broker: MessageBroker,
    readonly cleanup: (() => Promise<void>) | undefined,
    readonly makeSibling: (() => Promise<MessageBroker>) | undefined,
    readonly abandon: ((delivery: Delivery) => Promise<void>) | undefined,
  ) {}

  /** Another broker on the same system, closed after the test; undefined when the factory has none. */
  async sibling(): Promise<MessageBroker | undefined> {
    if (this.makeSibling === undefined) return undefined;
    const sibling = await this.makeSibling();
    this.#siblings.push(sibling);
    return sibling;
  }

  /** An endpoint name no other test uses. */
  endpoint(label: string): string {
    return `conformance-${this.#suffix}-${label}`;
  }

  /** A message type no other test uses. */
  type(label: string): string {
    return `conformance.t${this.#suffix}.${label}`;
  }

  /** A receiver for `endpoint` (of `options.broker`, by default the broker under test), stopped after the test. */
  inbox(
    endpoint: string,
    options: { readonly prefetch?: number; readonly broker?: MessageBroker } = {},
  ): Inbox {
    const inbox = new Inbox(options.broker ?? this.broker, endpoint, options.prefetch);
    this.#inboxes.push(inbox);
    return inbox;
  }

  /** Registers one command subscription for `types` on `endpoint`, beside what the test registered there. */
  async commands(endpoint: string, ...types: string[]): Promise<void> {
    await this.#register(endpoint, [{ handler: 'commands', kind: 'command', types }]);
  }

  /** Registers an ordered command type on `endpoint` (declared in `orderedTypes`, as the registry does). */
  async orderedCommands(endpoint: string, ...types: string[]): Promise<void> {
    await this.#register(endpoint, [{ handler: 'commands', kind: 'command', types, orderedTypes: types }]);
  }

  /** Registers event subscriptions on `endpoint`, one per handler, beside what the test registered there. */
  async events(endpoint: string, subscriptions: Record<string, string[]>): Promise<void> {
    const specs: SubscriptionSpec[] = Object.entries(subscriptions).map(([handler, types]) => ({
      handler,
      kind: 'event',
      types,
    }));
    await this.#register(endpoint, specs);
  }

  /**
   * Registers `specs` on `endpoint` with the subscriptions this fixture registered there before (a
   * spec of the same kind and handler replaced): `register` replaces an endpoint's subscriptions.
   */
  async #register(endpoint: string, specs: readonly SubscriptionSpec[]): Promise<void> {
    const all = new Map(
      (this.#registered.get(endpoint) ?? []).map((spec) => [`${spec.kind}/${spec.handler}`, spec]),
    );
    for (const spec of specs) all.set(`${spec.kind}/${spec.handler}`, spec);
    this.#registered.set(endpoint, [...all.values()]);
    await this.broker.register(endpoint, [...all.values()]);
  }

  /** A message with a fresh UUIDv7 id and an arbitrary, non-envelope body. */
  message(kind: MessageKind, type: string, extra: Partial<OutgoingMessage> = {}): OutgoingMessage {
    const id = extra.id ?? uuidv7();
    return { id, kind, type, body: bodyFor(`${type}/${id}`), ...extra };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.broker.close();
  }

  async dispose(): Promise<void> {
    try {
      await Promise.all(this.#inboxes.map((inbox) => inbox.stop()));
      await Promise.all(this.#siblings.map((sibling) => sibling.close()));
      await this.close();
    } finally {
      await this.cleanup?.();
    }
  }
}

/**
 * Registers the shared vitest suite that every {@link MessageBroker} must pass.
 *
 * @remarks
 * The suite runs in real time (short delays of a few hundred ms) and waits for conditions rather than
 * sleeping, so it runs unchanged against brokers on real infrastructure such as Redis. Every test
 * uses its own endpoint names and message types, so many tests can share one server; `factory` is
 * called once per test and the broker it returns is closed after the test, then `cleanup` runs.
 *
 * @param name - names the implementation in the suite title.
 * @param factory - makes a fresh broker (and optional cleanup) for one test.
 * @example
 * ```ts
 * import { describeMessageBrokerConformance } from 'harrier/testing/conformance';
 *
 * describeMessageBrokerConformance('MyBroker', async () => {
 *   const broker = await MyBroker.connect(process.env.BROKER_URL);
 *   return { broker, cleanup: () => broker.dispose() };
 * });
 * ```
 */
export function describeMessageBrokerConformance(
  name: string,
  factory: () => Promise<MessageBrokerUnderTest>,
): void {
  describe(`MessageBroker conformance: ${name}`, () => {
    let fixture: Fixture | undefined;
    const f = (): Fixture => {
      if (fixture === undefined) throw new Error('The conformance fixture is not set up');
      return fixture;
    };

    beforeEach(async () => {
      const made = await factory();
      fixture = new Fixture(made.broker, made.cleanup, made.sibling, made.abandon);
    });

    /**
     * Called in a `describe`: its tests need `needs`, and skip on a broker whose `capabilities()`
     * lacks one, with the note `needs <capability>` in the test report.
     */
    const requires = (...needs: Need[]): void => {
      beforeEach(({ skip }) => {
        const missing = lacking(f().broker.capabilities(), needs);
        if (missing.length > 0) skip(`needs ${missing.join(', ')}`);
      });
    };

    afterEach(async () => {
      const current = fixture;
      fixture = undefined;
      await current?.dispose();
    });

    describe('.register', () => {
      describe('when called twice with the same subscriptions', () => {
        it('delivers each command and event once', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const command = f().type('PlaceOrder');
          const event = f().type('OrderPlaced');
          for (let i = 0; i < 2; i++) {
            await f().commands(endpoint, command);
            await f().events(endpoint, { onPlaced: [event] });
          }
          const inbox = f().inbox(endpoint);
          await broker.publish(f().message('command', command));
          await broker.publish(f().message('event', event));

          const deliveries = await inbox.take(2);
          expect(deliveries.map((d) => d.facts.type).sort()).toEqual([command, event].sort());
          for (const delivery of deliveries) await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when called again without one of the event subscriptions', () => {
        it('gives that subscription no copy of later events, and keeps what it had for a registration that brings it back', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placed = f().type('OrderPlaced');
          const both = [
            { handler: 'audit', kind: 'event', types: [placed] },
            { handler: 'mail', kind: 'event', types: [placed] },
          ] as const;
          await broker.register(endpoint, both);
          const before = f().message('event', placed);
          await broker.publish(before);

          await broker.register(endpoint, [both[0]]);
          const after = f().message('event', placed);
          await broker.publish(after);

          const auditOnly = f().inbox(endpoint);
          const audited = await auditOnly.take(2);
          expect(audited.map((d) => [d.facts.handler, d.facts.messageId]).sort()).toEqual(
            [
              ['audit', before.id],
              ['audit', after.id],
            ].sort(),
          );
          for (const delivery of audited) await broker.ack(delivery.id);
          await auditOnly.expectNothingWithin();
          await auditOnly.stop();

          await broker.register(endpoint, both);
          const again = f().inbox(endpoint);
          const kept = await again.next();
          expect([kept.facts.handler, kept.facts.messageId]).toEqual(['mail', before.id]);
          await broker.ack(kept.id);
          await again.expectNothingWithin();
        });
      });

      describe('when called again without a command type', () => {
        it('refuses that type with no-route until another endpoint registers it', async () => {
          const { broker } = f();
          const orders = f().endpoint('orders');
          const billing = f().endpoint('billing');
          const placeOrder = f().type('PlaceOrder');
          const chargeCard = f().type('ChargeCard');
          await broker.register(orders, [
            { handler: 'commands', kind: 'command', types: [placeOrder, chargeCard] },
          ]);
          await broker.publish(f().message('command', chargeCard));

          await broker.register(orders, [{ handler: 'commands', kind: 'command', types: [placeOrder] }]);

          expectCode(await failureOf(() => broker.publish(f().message('command', chargeCard))), 'no-route');
          await broker.publish(f().message('command', chargeCard, { requireRoute: false }));
          await broker.publish(f().message('command', placeOrder));
          const inbox = f().inbox(orders);
          const delivery = await inbox.next();
          expect(delivery.facts.type).toBe(placeOrder);
          await broker.ack(delivery.id);
          await inbox.expectNothingWithin();

          await broker.register(billing, [{ handler: 'commands', kind: 'command', types: [chargeCard] }]);
          await broker.publish(f().message('command', chargeCard));
          const charges = await f().inbox(billing).take(3);
          expect(charges.map((d) => d.facts.type)).toEqual([chargeCard, chargeCard, chargeCard]);
        });
      });
    });

    describe('.publish', () => {
      describe('when no endpoint registered the command type', () => {
        it('refuses the command with no-route naming the type, and queues nothing', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          const cancelOrder = f().type('CancelOrder');
          await f().commands(endpoint, cancelOrder);
          await f().events(endpoint, { onPlaceOrder: [placeOrder] });

          const error: unknown = await broker.publish(f().message('command', placeOrder)).then(
            () => undefined,
            (e: unknown) => e,
          );

          expect(HarrierError.is(error) && error.code).toBe('no-route');
          expect((error as Error).message).toContain(`"${placeOrder}"`);
          await f().commands(endpoint, placeOrder);
          await f().inbox(endpoint).expectNothingWithin();
        });
      });

      describe('when requireRoute is false and no endpoint registered the command type yet', () => {
        it('accepts the command and delivers it once an endpoint registers the type', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          const message = f().message('command', placeOrder, { requireRoute: false });

          await broker.publish(message);

          await f().commands(endpoint, placeOrder);
          const delivery = await f().inbox(endpoint).next();
          expect(delivery.facts).toMatchObject({ messageId: message.id, type: placeOrder, attempt: 1 });
          expect(delivery.body).toBe(message.body);
        });
      });

      describe('when the endpoint that registered the command type is not receiving', () => {
        it('accepts the command, which waits in its queue for a receiver', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const message = f().message('command', placeOrder);

          await broker.publish(message);

          const delivery = await f().inbox(endpoint).next();
          expect(delivery.facts).toMatchObject({ messageId: message.id, attempt: 1 });
        });
      });

      describe('when the message is a command', () => {
        it('delivers it only to the endpoint that registered its type, body untouched', async () => {
          const { broker } = f();
          const orders = f().endpoint('orders');
          const billing = f().endpoint('billing');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(orders, placeOrder);
          await f().commands(billing, f().type('ChargeCard'));
          const ordersInbox = f().inbox(orders);
          const billingInbox = f().inbox(billing);
          const message = f().message('command', placeOrder, { partitionKey: 'order-1' });

          await broker.publish(message);

          const delivery = await ordersInbox.next();
          expect(delivery.body).toBe(message.body);
          // `queue` is the broker's own name for the queue: any string, or none.
          expect(['string', 'undefined']).toContain(typeof delivery.facts.queue);
          // `unsettledEnds` may be left out for none.
          const unsettledEnds = delivery.facts.unsettledEnds ?? 0;
          expect({ ...delivery.facts, queue: undefined, unsettledEnds }).toEqual({
            messageId: message.id,
            kind: 'command',
            type: placeOrder,
            endpoint: orders,
            handler: undefined,
            attempt: 1,
            unsettledEnds: 0,
            history: [],
            partitionKey: 'order-1',
            queue: undefined,
          });
          await billingInbox.expectNothingWithin();
        });

        it('is not delivered again once acked', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          await broker.publish(f().message('command', placeOrder));

          const delivery = await inbox.next();
          await broker.ack(delivery.id);

          await inbox.expectNothingWithin();
        });
      });

      describe('when the message is an event subscribed on two endpoints', () => {
        it('delivers one copy to each subscription with its handler name', async () => {
          const { broker } = f();
          const shipping = f().endpoint('shipping');
          const mailer = f().endpoint('mailer');
          const orderPlaced = f().type('OrderPlaced');
          await f().events(shipping, { reserveStock: [orderPlaced] });
          await f().events(mailer, { sendConfirmation: [orderPlaced] });
          const shippingInbox = f().inbox(shipping);
          const mailerInbox = f().inbox(mailer);
          const message = f().message('event', orderPlaced);

          await broker.publish(message);

          const atShipping = await shippingInbox.next();
          const atMailer = await mailerInbox.next();
          expect(atShipping.facts).toMatchObject({
            messageId: message.id,
            kind: 'event',
            type: orderPlaced,
            endpoint: shipping,
            handler: 'reserveStock',
            attempt: 1,
          });
          expect(atMailer.facts).toMatchObject({
            messageId: message.id,
            endpoint: mailer,
            handler: 'sendConfirmation',
            attempt: 1,
          });
          expect(atShipping.body).toBe(message.body);
          expect(atMailer.body).toBe(message.body);
          await broker.ack(atShipping.id);
          await broker.ack(atMailer.id);
          await shippingInbox.expectNothingWithin();
          await mailerInbox.expectNothingWithin(0);
        });
      });

      describe('when two handlers of one endpoint subscribe to the event', () => {
        it('delivers one copy per handler, each with its own delivery id', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reporting');
          const orderPlaced = f().type('OrderPlaced');
          await f().events(endpoint, { countOrders: [orderPlaced], sumRevenue: [orderPlaced] });
          const inbox = f().inbox(endpoint);
          const message = f().message('event', orderPlaced);

          await broker.publish(message);

          const deliveries = await inbox.take(2);
          expect(deliveries.map((d) => d.facts.handler).sort()).toEqual(['countOrders', 'sumRevenue']);
          expect(deliveries.map((d) => d.facts.messageId)).toEqual([message.id, message.id]);
          expect(new Set(deliveries.map((d) => d.id)).size).toBe(2);
          for (const delivery of deliveries) await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when no subscription takes the event type', () => {
        it('delivers it nowhere', async () => {
          const { broker } = f();
          const listener = f().endpoint('listener');
          const worker = f().endpoint('worker');
          const subscribed = f().type('Subscribed');
          const unsubscribed = f().type('Unsubscribed');
          await f().events(listener, { onSubscribed: [subscribed] });
          await f().commands(worker, unsubscribed);
          const listenerInbox = f().inbox(listener);
          const workerInbox = f().inbox(worker);

          await broker.publish(f().message('event', unsubscribed));
          await broker.publish(f().message('event', subscribed));

          const delivery = await listenerInbox.next();
          expect(delivery.facts.type).toBe(subscribed);
          await broker.ack(delivery.id);
          await listenerInbox.expectNothingWithin();
          await workerInbox.expectNothingWithin(0);
        });
      });

      describe('when the same id is published twice', () => {
        requires('dedupeWindowMs');

        it('delivers the event once per subscription', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reporting');
          const orderPlaced = f().type('OrderPlaced');
          await f().events(endpoint, { countOrders: [orderPlaced], sumRevenue: [orderPlaced] });
          const inbox = f().inbox(endpoint);
          const message = f().message('event', orderPlaced);

          await broker.publish(message);
          await broker.publish(message);

          const deliveries = await inbox.take(2);
          expect(deliveries.map((d) => d.facts.handler).sort()).toEqual(['countOrders', 'sumRevenue']);
          for (const delivery of deliveries) await broker.ack(delivery.id);
          await broker.publish(message);
          await inbox.expectNothingWithin();
        });

        it('delivers the command once', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);

          await broker.publish(message);
          await broker.publish(message);

          const delivery = await inbox.next();
          expect(delivery.facts.messageId).toBe(message.id);
          await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });

      describe("when the same id with dedupe 'while-queued' is published twice while the first is queued", () => {
        requires('dedupeWindowMs');

        it('delivers the event once per subscription and the command once', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('billing');
          const invoiced = f().type('OrderInvoiced');
          const charge = f().type('ChargeCard');
          await f().commands(endpoint, charge);
          await f().events(endpoint, { mailInvoice: [invoiced], bookRevenue: [invoiced] });
          const event = f().message('event', invoiced, { dedupe: 'while-queued' });
          const command = f().message('command', charge, { dedupe: 'while-queued' });

          await broker.publishBatch([event, command]);
          await broker.publishBatch([event, command]);

          const inbox = f().inbox(endpoint);
          const deliveries = await inbox.take(3);
          expect(deliveries.map((d) => d.facts.handler ?? d.facts.type).sort()).toEqual(
            ['bookRevenue', charge, 'mailInvoice'].sort(),
          );
          for (const delivery of deliveries) await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when deliverAt is in the future', () => {
        requires('delayedDelivery');

        it('does not deliver before deliverAt and delivers after it', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('scheduler');
          const remind = f().type('SendReminder');
          await f().commands(endpoint, remind);
          const inbox = f().inbox(endpoint);
          const deliverAt = Date.now() + DELAY_MS;

          await broker.publish(f().message('command', remind, { deliverAt }));

          await inbox.expectNothingWithin(DELAY_MS / 2);
          const delivery = await inbox.next();
          expect(Date.now()).toBeGreaterThanOrEqual(deliverAt);
          expect(delivery.facts).toMatchObject({ type: remind, attempt: 1 });
        });
      });

      describe('when ordered messages share a partition key', () => {
        requires('orderedDelivery');

        it('delivers them one at a time in publish order without holding up another key', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('accounts');
          const post = f().type('PostEntry');
          await f().orderedCommands(endpoint, post);
          const inbox = f().inbox(endpoint);
          const a = [1, 2, 3].map((n) =>
            f().message('command', post, { partitionKey: 'account-a', ordered: true, body: `a${n}` }),
          );
          const b1 = f().message('command', post, { partitionKey: 'account-b', ordered: true, body: 'b1' });

          for (const message of [...a, b1]) await broker.publish(message);

          const first = await inbox.take(2);
          expect(first.map((d) => d.body).sort()).toEqual(['a1', 'b1']);
          await inbox.expectNothingWithin();
          await broker.ack(pick(first, (d) => d.body === 'b1').id);
          await inbox.expectNothingWithin();

          const seen = ['a1'];
          let current = pick(first, (d) => d.body === 'a1');
          for (const expected of ['a2', 'a3']) {
            await broker.ack(current.id);
            current = await inbox.next();
            expect(current.body).toBe(expected);
            seen.push(current.body);
            await inbox.expectNothingWithin(50);
          }
          await broker.ack(current.id);
          expect(seen).toEqual(['a1', 'a2', 'a3']);
          await inbox.expectNothingWithin();
        });
      });

      describe('when ordered commands of two types of one endpoint share a partition key', () => {
        requires('orderedDelivery');

        /** An endpoint taking `PlaceOrder` and `CancelOrder`, each from its own handler, both ordered. */
        async function shop(): Promise<{
          inbox: Inbox;
          place: (key: string, body: string) => OutgoingMessage;
          cancel: (key: string, body: string) => OutgoingMessage;
        }> {
          const endpoint = f().endpoint('shop');
          const placeType = f().type('PlaceOrder');
          const cancelType = f().type('CancelOrder');
          await f().broker.register(endpoint, [
            { handler: 'placeOrder', kind: 'command', types: [placeType], orderedTypes: [placeType] },
            { handler: 'cancelOrder', kind: 'command', types: [cancelType], orderedTypes: [cancelType] },
          ]);
          const ordered = (type: string) => (key: string, body: string) =>
            f().message('command', type, { partitionKey: key, ordered: true, body });
          return { inbox: f().inbox(endpoint), place: ordered(placeType), cancel: ordered(cancelType) };
        }

        it('holds the second type while the first is unsettled, delivers it after the ack, and holds up no other key', async () => {
          const { broker } = f();
          const { inbox, place, cancel } = await shop();

          for (const message of [
            place('order-1', 'place 1'),
            cancel('order-1', 'cancel 1'),
            cancel('order-2', 'cancel 2'),
          ])
            await broker.publish(message);

          const first = await inbox.take(2);
          expect(first.map((d) => d.body).sort()).toEqual(['cancel 2', 'place 1']);
          // PlaceOrder's handler is slow: its delivery stays unsettled while the other key goes on.
          await broker.ack(pick(first, (d) => d.body === 'cancel 2').id);
          await inbox.expectNothingWithin(QUIET_MS);
          await inbox.expectNothingWithin(QUIET_MS);
          const placed = pick(first, (d) => d.body === 'place 1');
          await broker.ack(placed.id);

          const cancelled = await inbox.next();
          expect(cancelled.body).toBe('cancel 1');
          expect(cancelled.facts.attempt).toBe(1);
          // However the broker orders them, each delivery names its own type's queue, or none.
          for (const delivery of [placed, cancelled])
            expect([undefined, commandQueue(delivery.facts.type ?? '')]).toContain(delivery.facts.queue);
          await broker.ack(cancelled.id);
          await inbox.expectNothingWithin();
        });

        describe('and the first waits for its retry', () => {
          requires('delayedDelivery');

          it('keeps the second type waiting until the retried first is acked', async () => {
            const { broker } = f();
            const { inbox, place, cancel } = await shop();
            await broker.publish(place('order-1', 'place 1'));
            await broker.publish(cancel('order-1', 'cancel 1'));

            const placed = await inbox.next();
            expect(placed.body).toBe('place 1');
            const retryAt = Date.now() + DELAY_MS;
            await broker.nack(placed.id, { retryAt, error: { name: 'Error', message: 'try later' } });

            const retried = await inbox.next();
            expect(retried.body).toBe('place 1');
            expect(retried.facts.attempt).toBe(2);
            expect(Date.now()).toBeGreaterThanOrEqual(retryAt);
            await inbox.expectNothingWithin();
            await broker.ack(retried.id);
            const cancelled = await inbox.next();
            expect(cancelled.body).toBe('cancel 1');
            await broker.ack(cancelled.id);
          });
        });
      });

      describe('when ordered events of two types of one subscription share a partition key', () => {
        requires('orderedDelivery');

        it('holds the second type while the first is unsettled, delivers it after the ack, and holds up no other key', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reporting');
          const placedType = f().type('OrderPlaced');
          const cancelledType = f().type('OrderCancelled');
          const types = [placedType, cancelledType];
          await broker.register(endpoint, [
            { handler: 'orderStatus', kind: 'event', types, orderedTypes: types },
          ]);
          const inbox = f().inbox(endpoint);
          const event = (type: string, key: string, body: string): OutgoingMessage =>
            f().message('event', type, { partitionKey: key, ordered: true, body });

          for (const message of [
            event(placedType, 'order-1', 'placed 1'),
            event(cancelledType, 'order-1', 'cancelled 1'),
            event(cancelledType, 'order-2', 'cancelled 2'),
          ])
            await broker.publish(message);

          const first = await inbox.take(2);
          expect(first.map((d) => d.body).sort()).toEqual(['cancelled 2', 'placed 1']);
          await broker.ack(pick(first, (d) => d.body === 'cancelled 2').id);
          await inbox.expectNothingWithin(QUIET_MS);
          await inbox.expectNothingWithin(QUIET_MS);
          const placed = pick(first, (d) => d.body === 'placed 1');
          await broker.ack(placed.id);

          const cancelled = await inbox.next();
          expect(cancelled.body).toBe('cancelled 1');
          expect(cancelled.facts).toMatchObject({ handler: 'orderStatus', attempt: 1 });
          for (const delivery of [placed, cancelled])
            expect([undefined, subscriptionQueue(endpoint, 'orderStatus')]).toContain(delivery.facts.queue);
          await broker.ack(cancelled.id);
          await inbox.expectNothingWithin();
        });
      });
    });

    describe('.publishBatch', () => {
      describe('when given commands and events', () => {
        it('delivers every one of them', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          const orderPlaced = f().type('OrderPlaced');
          await f().commands(endpoint, placeOrder);
          await f().events(endpoint, { onPlaced: [orderPlaced] });
          const inbox = f().inbox(endpoint);
          const messages = [
            f().message('command', placeOrder),
            f().message('command', placeOrder),
            f().message('event', orderPlaced),
            f().message('event', orderPlaced),
          ];

          await broker.publishBatch(messages);

          const deliveries = await inbox.take(messages.length);
          expect(deliveries.map((d) => d.facts.messageId).sort()).toEqual(messages.map((m) => m.id).sort());
          for (const delivery of deliveries) {
            expect(delivery.body).toBe(messages.find((m) => m.id === delivery.facts.messageId)?.body);
            await broker.ack(delivery.id);
          }
          await inbox.expectNothingWithin();
        });
      });

      describe('when one command of the batch has no route', () => {
        it('refuses the whole batch with no-route and delivers none of it', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          const orderPlaced = f().type('OrderPlaced');
          const unrouted = f().type('ShipOrder');
          await f().commands(endpoint, placeOrder);
          await f().events(endpoint, { onPlaced: [orderPlaced] });
          const inbox = f().inbox(endpoint);

          const error: unknown = await broker
            .publishBatch([
              f().message('command', placeOrder),
              f().message('event', orderPlaced),
              f().message('command', unrouted),
            ])
            .then(
              () => undefined,
              (e: unknown) => e,
            );

          expect(HarrierError.is(error) && error.code).toBe('no-route');
          expect((error as Error).message).toContain(`"${unrouted}"`);
          await inbox.expectNothingWithin();
        });
      });

      describe('when it repeats an id already published', () => {
        requires('dedupeWindowMs');

        it('delivers the message once per subscription', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          const orderPlaced = f().type('OrderPlaced');
          await f().commands(endpoint, placeOrder);
          await f().events(endpoint, { first: [orderPlaced], second: [orderPlaced] });
          const inbox = f().inbox(endpoint);
          const command = f().message('command', placeOrder);
          const event = f().message('event', orderPlaced);

          await broker.publish(command);
          await broker.publish(event);
          await broker.publishBatch([command, event, event]);

          const deliveries = await inbox.take(3);
          expect(
            deliveries.map((d) => `${String(d.facts.messageId)}/${String(d.facts.handler)}`).sort(),
          ).toEqual([`${command.id}/undefined`, `${event.id}/first`, `${event.id}/second`].sort());
          for (const delivery of deliveries) await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });
    });

    describe('.ack', () => {
      describe('when the delivery was already acked', () => {
        it('refuses the id with StaleDeliveryError', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          await broker.publish(f().message('command', placeOrder));
          const delivery = await inbox.next();
          await broker.ack(delivery.id);

          const error: unknown = await broker.ack(delivery.id).then(
            () => undefined,
            (e: unknown) => e,
          );

          expect(isStale(error)).toBe(true);
        });
      });

      describe('when the message was released and delivered again', () => {
        it('refuses the old id with StaleDeliveryError and accepts the new one', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          await broker.publish(f().message('command', placeOrder));
          const first = await inbox.next();
          await broker.nack(first.id, { release: true });
          const second = await inbox.next();
          expect(second.id).not.toBe(first.id);

          const ackError: unknown = await broker.ack(first.id).then(
            () => undefined,
            (e: unknown) => e,
          );
          const nackError: unknown = await broker.nack(first.id, { retryAt: Date.now() }).then(
            () => undefined,
            (e: unknown) => e,
          );

          expect(isStale(ackError)).toBe(true);
          expect(isStale(nackError)).toBe(true);
          await broker.ack(second.id);
          await inbox.expectNothingWithin();
        });
      });
    });

    describe('.nack', () => {
      describe('when given retryAt', () => {
        requires('delayedDelivery');

        it('redelivers no earlier than retryAt with the next attempt number and the error in history', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const first = await inbox.next();
          const error: ErrorInfo = { name: 'PaymentDeclined', message: 'card declined', code: 'declined' };
          const retryAt = Date.now() + DELAY_MS;

          await broker.nack(first.id, { retryAt, error });

          await inbox.expectNothingWithin(DELAY_MS / 2);
          const second = await inbox.next();
          expect(Date.now()).toBeGreaterThanOrEqual(retryAt);
          expect(second.id).not.toBe(first.id);
          expect(second.body).toBe(message.body);
          expect(second.facts.messageId).toBe(message.id);
          expect(second.facts.attempt).toBe(first.facts.attempt + 1);
          expect(second.facts.history).toEqual([{ attempt: 1, at: expect.any(Number) as number, error }]);
        });
      });

      describe('when given retryAt with a pending dead letter', () => {
        requires('redeliver');

        it('hands the pending dead letter back with the next delivery, and a replay starts without it', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const first = await inbox.next();
          expect(first.facts.pendingDeadLetter).toBeUndefined();
          const pendingDeadLetter: PendingDeadLetter = {
            reason: 'handler-failed',
            handler: 'PlaceOrderHandler',
            attempt: first.facts.attempt,
            at: 1_700_000_000_000,
            error: { name: 'PaymentDeclined', message: 'card declined' },
          };

          await broker.nack(first.id, { retryAt: Date.now(), pendingDeadLetter });

          const second = await inbox.next();
          expect(second.facts.messageId).toBe(message.id);
          expect(second.facts.pendingDeadLetter).toEqual(pendingDeadLetter);
          await broker.nack(second.id, { deadLetter: 'handler-failed' });
          await broker.redeliver({ endpoint, handler: 'PlaceOrderHandler', message });
          const replayed = await inbox.next();
          expect(replayed.facts.pendingDeadLetter).toBeUndefined();
          await broker.ack(replayed.id);
        });
      });

      describe('when given deadLetter', () => {
        it('never delivers the message again', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          await broker.publish(f().message('command', placeOrder));
          const delivery = await inbox.next();

          await broker.nack(delivery.id, {
            deadLetter: 'handler-failed',
            error: { name: 'Error', message: 'boom' },
          });

          await inbox.expectNothingWithin(DELAY_MS);
        });
      });

      describe('when given release', () => {
        it('redelivers the message with the same attempt number', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const first = await inbox.next();
          await broker.nack(first.id, { retryAt: Date.now(), error: { name: 'Error', message: 'boom' } });
          const second = await inbox.next();
          expect(second.facts.attempt).toBe(2);

          await broker.nack(second.id, { release: true });

          const third = await inbox.next();
          expect(third.facts.messageId).toBe(message.id);
          expect(third.body).toBe(message.body);
          expect(third.facts.attempt).toBe(2);
          expect(third.facts.history).toHaveLength(1);
        });
      });

      describe('when given release with retryAt', () => {
        requires('delayedDelivery');

        it('redelivers no earlier than retryAt with the same attempt number and history', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const first = await inbox.next();
          const retryAt = Date.now() + DELAY_MS;

          await broker.nack(first.id, { release: true, retryAt });

          await inbox.expectNothingWithin(DELAY_MS / 2);
          const second = await inbox.next();
          expect(Date.now()).toBeGreaterThanOrEqual(retryAt);
          expect(second.body).toBe(message.body);
          expect(second.facts.messageId).toBe(message.id);
          expect(second.facts.attempt).toBe(first.facts.attempt);
          expect(second.facts.history).toEqual([]);
          await broker.ack(second.id);
        });
      });

      describe('when an ordered message is retried', () => {
        requires('orderedDelivery', 'delayedDelivery');

        it('keeps the next message of its key waiting but not the messages of other keys', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('accounts');
          const post = f().type('PostEntry');
          await f().orderedCommands(endpoint, post);
          const inbox = f().inbox(endpoint);
          const ordered = (key: string, body: string): OutgoingMessage =>
            f().message('command', post, { partitionKey: key, ordered: true, body });

          for (const message of [ordered('k', 'k1'), ordered('k', 'k2'), ordered('l', 'l1')]) {
            await broker.publish(message);
          }
          const first = await inbox.take(2);
          expect(first.map((d) => d.body).sort()).toEqual(['k1', 'l1']);
          const k1 = pick(first, (d) => d.body === 'k1');
          const l1 = pick(first, (d) => d.body === 'l1');
          // Long enough that publishing and delivering l2 fits before it on a loaded machine.
          const retryAt = Date.now() + HOLD_MS;
          await broker.nack(k1.id, { retryAt, error: { name: 'Error', message: 'try later' } });
          await broker.ack(l1.id);
          await broker.publish(ordered('l', 'l2'));

          const l2 = await inbox.next();
          expect(l2.body).toBe('l2');
          expect(Date.now()).toBeLessThan(retryAt);
          await broker.ack(l2.id);

          const retried = await inbox.next();
          expect(retried.body).toBe('k1');
          expect(retried.facts.attempt).toBe(2);
          expect(Date.now()).toBeGreaterThanOrEqual(retryAt);
          await inbox.expectNothingWithin();
          await broker.ack(retried.id);
          const k2 = await inbox.next();
          expect(k2.body).toBe('k2');
          expect(k2.facts.attempt).toBe(1);
        });
      });
    });

    describe('.redeliver', () => {
      requires('redeliver');

      describe('when replaying an event into one subscription', () => {
        it('delivers it to that subscription only, with attempt 1, despite the publish dedupe', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reporting');
          const orderPlaced = f().type('OrderPlaced');
          await f().events(endpoint, { countOrders: [orderPlaced], sumRevenue: [orderPlaced] });
          const inbox = f().inbox(endpoint);
          const message = f().message('event', orderPlaced);
          await broker.publish(message);
          const deliveries = await inbox.take(2);
          const failing = pick(deliveries, (d) => d.facts.handler === 'countOrders');
          const passing = pick(deliveries, (d) => d.facts.handler === 'sumRevenue');
          await broker.ack(passing.id);
          await broker.nack(failing.id, { retryAt: Date.now(), error: { name: 'Error', message: 'boom' } });
          const retried = await inbox.next();
          expect(retried.facts.attempt).toBe(2);
          await broker.nack(retried.id, { deadLetter: 'handler-failed' });

          await broker.redeliver({ endpoint, handler: 'countOrders', message });

          const replayed = await inbox.next();
          expect(replayed.facts).toMatchObject({
            messageId: message.id,
            handler: 'countOrders',
            attempt: 1,
            history: [],
          });
          expect(replayed.body).toBe(message.body);
          await broker.ack(replayed.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when replaying a command', () => {
        it('delivers it again with attempt 1', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const first = await inbox.next();
          await broker.nack(first.id, { retryAt: Date.now(), error: { name: 'Error', message: 'boom' } });
          const second = await inbox.next();
          await broker.nack(second.id, { deadLetter: 'handler-failed' });

          await broker.redeliver({ endpoint, handler: 'commands', message });

          const replayed = await inbox.next();
          expect(replayed.facts).toMatchObject({ messageId: message.id, attempt: 1, history: [] });
          expect(replayed.body).toBe(message.body);
          expect(replayed.facts.replayOf).toBeUndefined();
        });
      });

      /**
       * A command on an endpoint of its own, published, delivered once and dead-lettered; `ordered`
       * makes it an ordered type with a partition key.
       */
      async function deadLetteredCommand(ordered: boolean) {
        const endpoint = f().endpoint(ordered ? 'accounts' : 'orders');
        const type = f().type(ordered ? 'PostEntry' : 'PlaceOrder');
        await (ordered ? f().orderedCommands(endpoint, type) : f().commands(endpoint, type));
        const inbox = f().inbox(endpoint);
        const message = f().message('command', type, ordered ? { partitionKey: 'k', ordered: true } : {});
        await f().broker.publish(message);
        const first = await inbox.next();
        await f().broker.nack(first.id, { deadLetter: 'handler-failed' });
        return { broker: f().broker, endpoint, type, inbox, message, first };
      }

      describe('when given the dead letter id of a dead-lettered message', () => {
        it('hands it back as replayOf on every delivery of the replay, retries included, and never on a publish', async () => {
          const { broker, endpoint, type, inbox, message, first } = await deadLetteredCommand(false);
          expect(first.facts.replayOf).toBeUndefined();

          await broker.redeliver({ endpoint, handler: 'commands', message, deadLetterId: 'dl-1' });

          const replayed = await inbox.next();
          expect(replayed.facts).toMatchObject({ messageId: message.id, attempt: 1, replayOf: 'dl-1' });
          await broker.nack(replayed.id, { retryAt: Date.now(), error: { name: 'Error', message: 'boom' } });
          const retried = await inbox.next();
          expect(retried.facts).toMatchObject({ attempt: 2, replayOf: 'dl-1' });
          await broker.nack(retried.id, { release: true });
          const released = await inbox.next();
          expect(released.facts).toMatchObject({ attempt: 2, replayOf: 'dl-1' });
          await broker.ack(released.id);

          const other = f().message('command', type);
          await broker.publish(other);
          const published = await inbox.next();
          expect(published.facts.messageId).toBe(other.id);
          expect(published.facts.replayOf).toBeUndefined();
        });
      });

      describe('when given a dead letter id of a message the broker no longer holds', () => {
        it('hands it back as replayOf', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reporting');
          const orderPlaced = f().type('OrderPlaced');
          await f().events(endpoint, { countOrders: [orderPlaced] });
          const inbox = f().inbox(endpoint);
          const message = f().message('event', orderPlaced);

          await broker.redeliver({ endpoint, handler: 'countOrders', message, deadLetterId: 'dl-2' });

          const replayed = await inbox.next();
          expect(replayed.facts).toMatchObject({
            messageId: message.id,
            handler: 'countOrders',
            replayOf: 'dl-2',
          });
          await broker.ack(replayed.id);
        });
      });

      describe('when given a dead letter id of an ordered message', () => {
        it('keeps replayOf on the retry of the replay', async () => {
          const { broker, endpoint, inbox, message } = await deadLetteredCommand(true);

          await broker.redeliver({ endpoint, handler: 'commands', message, deadLetterId: 'dl-3' });

          const replayed = await inbox.next();
          expect(replayed.facts.replayOf).toBe('dl-3');
          await broker.nack(replayed.id, { retryAt: Date.now(), error: { name: 'Error', message: 'boom' } });
          const retried = await inbox.next();
          expect(retried.facts).toMatchObject({ attempt: 2, replayOf: 'dl-3' });
          await broker.ack(retried.id);
        });
      });
    });

    describe('.receiver', () => {
      describe('when its signal aborts', () => {
        it('ends, and takes no more messages', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const aborted = f().inbox(endpoint);
          expect(await aborted.ends(50)).toBe(false);

          aborted.abort();

          expect(await aborted.ends()).toBe(true);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const delivery = await f().inbox(endpoint).next();
          expect(delivery.facts).toMatchObject({ messageId: message.id, attempt: 1 });
        });
      });
    });

    describe('unsettled ends', () => {
      requires('crashCounting');
      /** The factory's `abandon`, or skips the test: the hook is optional. */
      const abandonOf = (skip: (note?: string) => void): ((delivery: Delivery) => Promise<void>) => {
        const { abandon } = f();
        if (abandon === undefined) {
          skip(`${name}'s factory gives no abandon hook: the tests of unsettled ends need one`);
          throw new Error('skipped');
        }
        return abandon;
      };

      describe('when the holder of a delivery goes away without settling it', () => {
        it('delivers the message again with the next attempt and one unsettled end', async ({ skip }) => {
          const abandon = abandonOf(skip);
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const first = await inbox.next();
          expect(first.facts).toMatchObject({ messageId: message.id, attempt: 1 });
          expect(first.facts.unsettledEnds ?? 0).toBe(0);

          await abandon(first);

          const again = await inbox.next(ARRIVES_WITHIN_MS * 2);
          expect(again.facts).toMatchObject({ messageId: message.id, attempt: 2, unsettledEnds: 1 });
          expect(again.body).toBe(message.body);
          await broker.ack(again.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when a delivery is released, and the holder of the next one goes away', () => {
        it('counts the end but not the release', async ({ skip }) => {
          const abandon = abandonOf(skip);
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          await broker.publish(f().message('command', placeOrder));
          await broker.nack((await inbox.next()).id, { release: true });
          const released = await inbox.next();
          expect(released.facts.attempt).toBe(1);
          expect(released.facts.unsettledEnds ?? 0).toBe(0);

          await abandon(released);
          const abandoned = await inbox.next(ARRIVES_WITHIN_MS * 2);
          expect(abandoned.facts).toMatchObject({ attempt: 2, unsettledEnds: 1 });
          await broker.nack(abandoned.id, { retryAt: Date.now(), error: { name: 'Error', message: 'boom' } });
          const retried = await inbox.next();
          expect(retried.facts).toMatchObject({ attempt: 3, unsettledEnds: 1 });
          expect(retried.facts.history.map((record) => record.attempt)).toEqual([2]);
          await broker.ack(retried.id);
        });
      });

      describe('when a message that ended unsettled is dead-lettered and redelivered', () => {
        it('starts again at attempt 1 with no unsettled end', async ({ skip }) => {
          const abandon = abandonOf(skip);
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          await abandon(await inbox.next());
          const crashed = await inbox.next(ARRIVES_WITHIN_MS * 2);
          expect(crashed.facts.unsettledEnds).toBe(1);
          await broker.nack(crashed.id, { deadLetter: 'worker-crashed' });

          await broker.redeliver({ endpoint, handler: 'commands', message });

          const replayed = await inbox.next();
          expect(replayed.facts.attempt).toBe(1);
          expect(replayed.facts.unsettledEnds ?? 0).toBe(0);
          await broker.ack(replayed.id);
        });
      });
    });

    describe('.close', () => {
      describe('when a message is published afterwards', () => {
        it('rejects with HarrierError broker-closed', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);

          await f().close();

          expectCode(
            await failureOf(() => broker.publish(f().message('command', placeOrder))),
            'broker-closed',
          );
        });
      });

      describe('when receivers are waiting', () => {
        it('ends them', async () => {
          const orders = f().endpoint('orders');
          const mailer = f().endpoint('mailer');
          await f().commands(orders, f().type('PlaceOrder'));
          await f().events(mailer, { sendConfirmation: [f().type('OrderPlaced')] });
          const first = f().inbox(orders);
          const second = f().inbox(mailer);
          expect(await first.ends(50)).toBe(false);
          expect(await second.ends(0)).toBe(false);

          await f().close();

          expect(await first.ends()).toBe(true);
          expect(await second.ends()).toBe(true);
        });
      });
    });

    describe('.capabilities', () => {
      it('describes the broker with booleans and a dedupe window in whole ms, the same on every call', () => {
        const { broker } = f();

        const capabilities = broker.capabilities();

        expect(capabilities).toEqual({
          delayedDelivery: expect.any(Boolean) as boolean,
          dedupeWindowMs: expect.any(Number) as number,
          orderedDelivery: expect.any(Boolean) as boolean,
          queueDepths: expect.any(Boolean) as boolean,
          redeliver: expect.any(Boolean) as boolean,
          durable: expect.any(Boolean) as boolean,
          shared: expect.any(Boolean) as boolean,
          crashCounting: expect.any(Boolean) as boolean,
          cancelScheduled: expect.any(Boolean) as boolean,
        });
        expect(Number.isSafeInteger(capabilities.dedupeWindowMs)).toBe(true);
        expect(capabilities.dedupeWindowMs).toBeGreaterThanOrEqual(0);
        if (capabilities.queueDepths) expect(typeof broker.queueDepths).toBe('function');
        if (capabilities.cancelScheduled) expect(typeof broker.cancel).toBe('function');
        expect(broker.capabilities()).toEqual(capabilities);
      });
    });

    describe('.cancel', () => {
      requires('delayedDelivery', 'cancelScheduled');

      /** The broker's `cancel`, which `cancelScheduled` promises. */
      const cancel = (messageId: string): Promise<number> => {
        const { broker } = f();
        if (broker.cancel === undefined) expect.fail('cancelScheduled is declared, but cancel is missing');
        return broker.cancel(messageId);
      };

      describe('when a delayed command is cancelled before its time', () => {
        it('returns 1 and never delivers it, while a delayed command not cancelled arrives', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reminders');
          const remind = f().type('SendReminder');
          await f().commands(endpoint, remind);
          const inbox = f().inbox(endpoint);
          const cancelled = f().message('command', remind, { deliverAt: Date.now() + DELAY_MS });
          // Due after the cancelled one: once it arrives, the cancelled one would have been due.
          const kept = f().message('command', remind, { deliverAt: Date.now() + DELAY_MS + 100 });
          await broker.publishBatch([cancelled, kept]);

          expect(await cancel(cancelled.id)).toBe(1);

          const delivery = await inbox.next();
          expect(delivery.facts.messageId).toBe(kept.id);
          await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
          expect(await cancel(cancelled.id)).toBe(0);
        });
      });

      describe('when a delayed event is cancelled before its time', () => {
        it('removes its copy in every subscription', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('billing');
          const invoiced = f().type('InvoiceDue');
          await f().events(endpoint, { mailInvoice: [invoiced], bookRevenue: [invoiced] });
          const inbox = f().inbox(endpoint);
          const cancelled = f().message('event', invoiced, { deliverAt: Date.now() + DELAY_MS });
          const kept = f().message('event', invoiced, { deliverAt: Date.now() + DELAY_MS + 100 });
          await broker.publishBatch([cancelled, kept]);

          expect(await cancel(cancelled.id)).toBe(2);

          const deliveries = await inbox.take(2);
          expect(deliveries.map((d) => d.facts.messageId)).toEqual([kept.id, kept.id]);
          for (const delivery of deliveries) await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when the message was delivered already', () => {
        it('returns 0 and leaves the delivery in flight settleable', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reminders');
          const remind = f().type('SendReminder');
          await f().commands(endpoint, remind);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', remind, { deliverAt: Date.now() + DELAY_MS });
          await broker.publish(message);
          const delivery = await inbox.next();

          expect(await cancel(message.id)).toBe(0);

          await broker.ack(delivery.id);
          expect(await cancel(message.id)).toBe(0);
          await inbox.expectNothingWithin();
        });

        it('returns 0 for a copy waiting for a retry, and delivers that retry', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reminders');
          const remind = f().type('SendReminder');
          await f().commands(endpoint, remind);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', remind);
          await broker.publish(message);
          const first = await inbox.next();
          await broker.nack(first.id, { retryAt: Date.now() + DELAY_MS });

          expect(await cancel(message.id)).toBe(0);

          const retry = await inbox.next();
          expect(retry.facts).toMatchObject({ messageId: message.id, attempt: 2 });
          await broker.ack(retry.id);
        });
      });

      describe('when the cancelled message is ordered', () => {
        requires('orderedDelivery');

        it('delivers the later messages of its key', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('accounts');
          const post = f().type('PostEntry');
          await f().orderedCommands(endpoint, post);
          const inbox = f().inbox(endpoint);
          const later = { partitionKey: 'account-a', ordered: true } as const;
          const cancelled = f().message('command', post, { ...later, deliverAt: Date.now() + 60_000 });
          const next = f().message('command', post, later);
          await broker.publish(cancelled);
          await broker.publish(next);

          expect(await cancel(cancelled.id)).toBe(1);

          const delivery = await inbox.next();
          expect(delivery.facts.messageId).toBe(next.id);
          await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when the id is unknown', () => {
        it('returns 0', async () => {
          const endpoint = f().endpoint('reminders');
          await f().commands(endpoint, f().type('SendReminder'));

          expect(await cancel(uuidv7())).toBe(0);
        });
      });

      describe('when the cancelled id is published again', () => {
        it('delivers it', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reminders');
          const remind = f().type('SendReminder');
          await f().commands(endpoint, remind);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', remind, { deliverAt: Date.now() + 60_000 });
          await broker.publish(message);
          expect(await cancel(message.id)).toBe(1);

          await broker.publish({ ...message, deliverAt: undefined });

          const delivery = await inbox.next();
          expect(delivery.facts.messageId).toBe(message.id);
          await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });
    });

    describe('.receiver of an endpoint that never registered', () => {
      it('throws HarrierError not-registered, from receiver() or its first next()', async () => {
        const { broker } = f();
        const endpoint = f().endpoint('unregistered');
        const stop = new AbortController();

        const error = await failureOf(async () => {
          const iterator = broker.receiver({ endpoint, signal: stop.signal })[Symbol.asyncIterator]();
          let timer: ReturnType<typeof setTimeout> | undefined;
          try {
            const first = await Promise.race([
              iterator.next(),
              new Promise<'waiting'>((resolve) => {
                timer = setTimeout(() => {
                  resolve('waiting');
                }, QUIET_MS);
              }),
            ]);
            expect.fail(`receiver() of an unregistered endpoint answered ${JSON.stringify(first)}`);
          } finally {
            clearTimeout(timer);
            stop.abort();
          }
        });

        expectCode(error, 'not-registered');
        expect((error as Error).message).toContain(`"${endpoint}"`);
      });
    });

    describe('.receiver with a prefetch', () => {
      describe('when it holds prefetch unsettled deliveries', () => {
        it('takes no more until one of them settles', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint, { prefetch: 2 });
          const messages = [1, 2, 3, 4].map(() => f().message('command', placeOrder));
          for (const message of messages) await broker.publish(message);
          const [first, second] = await inbox.take(2);
          if (first === undefined || second === undefined) return expect.fail('two deliveries expected');

          await inbox.expectNothingWithin();
          await broker.ack(first.id);
          const third = await inbox.next();
          await inbox.expectNothingWithin();
          await broker.nack(second.id, { release: true });
          const fourth = await inbox.next();

          await inbox.expectNothingWithin();
          const ids = [first, second, third, fourth].map((d) => d.facts.messageId);
          expect(new Set(ids.slice(0, 3)).size).toBe(3);
          expect(messages.map((m) => m.id)).toEqual(expect.arrayContaining(ids));
        });
      });
    });

    describe('.redeliver of a message the subscription still holds', () => {
      requires('redeliver');

      describe('when it has not been delivered yet', () => {
        it('leaves it queued: it is delivered once, with attempt 1', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const message = f().message('command', placeOrder);
          await broker.publish(message);

          await broker.redeliver({ endpoint, handler: 'commands', message });

          const inbox = f().inbox(endpoint);
          const delivery = await inbox.next();
          expect(delivery.facts).toMatchObject({ messageId: message.id, attempt: 1, history: [] });
          await broker.ack(delivery.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when it waits for a retry', () => {
        requires('delayedDelivery');

        it('leaves it waiting: it is delivered once more, with its attempt and history', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('reporting');
          const orderPlaced = f().type('OrderPlaced');
          await f().events(endpoint, { countOrders: [orderPlaced] });
          const inbox = f().inbox(endpoint);
          const message = f().message('event', orderPlaced);
          await broker.publish(message);
          const first = await inbox.next();
          const error: ErrorInfo = { name: 'Error', message: 'boom' };
          await broker.nack(first.id, { retryAt: Date.now() + DELAY_MS, error });

          await broker.redeliver({ endpoint, handler: 'countOrders', message });

          const retried = await inbox.next();
          expect(retried.facts).toMatchObject({ messageId: message.id, handler: 'countOrders', attempt: 2 });
          expect(retried.facts.history).toEqual([{ attempt: 1, at: expect.any(Number) as number, error }]);
          await broker.ack(retried.id);
          await inbox.expectNothingWithin();
        });
      });

      describe('when a delivery of it is not settled yet', () => {
        it('waits for the settle, then replays what it left: here a dead letter, with attempt 1', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          const message = f().message('command', placeOrder);
          await broker.publish(message);
          const first = await inbox.next();
          let replayed = false;

          const replay = broker
            .redeliver({ endpoint, handler: 'commands', message, deadLetterId: 'dl-4' })
            .then(() => {
              replayed = true;
            });

          await inbox.expectNothingWithin();
          expect(replayed).toBe(false);
          await broker.nack(first.id, { deadLetter: 'handler-failed' });
          await replay;
          const again = await inbox.next();
          expect(again.facts).toMatchObject({
            messageId: message.id,
            attempt: 1,
            history: [],
            replayOf: 'dl-4',
          });
          await broker.ack(again.id);
          await inbox.expectNothingWithin();
        });
      });
    });

    describe('attempt history', () => {
      describe(`when a message failed more than MAX_ATTEMPT_HISTORY (${MAX_ATTEMPT_HISTORY}) times`, () => {
        it('keeps the newest attempts, the oldest dropped', async () => {
          const { broker } = f();
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          await f().commands(endpoint, placeOrder);
          const inbox = f().inbox(endpoint);
          await broker.publish(f().message('command', placeOrder));
          const failures = MAX_ATTEMPT_HISTORY + 2;

          for (let attempt = 1; attempt <= failures; attempt++) {
            const delivery = await inbox.next();
            expect(delivery.facts.attempt).toBe(attempt);
            expect(delivery.facts.history).toHaveLength(Math.min(attempt - 1, MAX_ATTEMPT_HISTORY));
            const error: ErrorInfo = { name: 'Error', message: `failure ${attempt}` };
            await broker.nack(delivery.id, { retryAt: Date.now(), error });
          }

          const last = await inbox.next();
          expect(last.facts.attempt).toBe(failures + 1);
          const kept = Array.from(
            { length: MAX_ATTEMPT_HISTORY },
            (_, i) => failures - MAX_ATTEMPT_HISTORY + 1 + i,
          );
          expect(last.facts.history.map((record) => record.attempt)).toEqual(kept);
          expect(last.facts.history.map((record) => record.error.message)).toEqual(
            kept.map((attempt) => `failure ${attempt}`),
          );
          await broker.ack(last.id);
        });
      });
    });

    describe('.queueDepths', () => {
      requires('queueDepths', 'delayedDelivery');

      it('counts the waiting, active and delayed messages of the endpoint', async () => {
        const { broker } = f();
        const endpoint = f().endpoint('orders');
        const placeOrder = f().type('PlaceOrder');
        await f().commands(endpoint, placeOrder);
        await broker.publish(f().message('command', placeOrder));
        await broker.publish(f().message('command', placeOrder));
        await broker.publish(f().message('command', placeOrder, { deliverAt: Date.now() + 60_000 }));
        const inbox = f().inbox(endpoint, { prefetch: 1 });
        await inbox.next();

        const totals = await eventually(
          async () => {
            if (broker.queueDepths === undefined)
              return expect.fail('capabilities().queueDepths but no queueDepths');
            return totalOf(await broker.queueDepths(endpoint));
          },
          (depth) => depth.waiting === 1 && depth.active === 1 && depth.delayed === 1,
        );

        expect(totals).toEqual({ waiting: 1, active: 1, delayed: 1 });
      });
    });

    describe('two broker instances on one system', () => {
      requires('shared');

      describe('when messages are published through one and received through the other', () => {
        it('delivers them, and the ack through the instance that delivered settles them', async ({
          skip,
        }) => {
          const { broker } = f();
          const other = await f().sibling();
          if (other === undefined) return skip('needs MessageBrokerUnderTest.sibling');
          const endpoint = f().endpoint('orders');
          const placeOrder = f().type('PlaceOrder');
          const orderPlaced = f().type('OrderPlaced');
          await other.register(endpoint, [
            { handler: 'commands', kind: 'command', types: [placeOrder] },
            { handler: 'onPlaced', kind: 'event', types: [orderPlaced] },
          ]);
          const inbox = f().inbox(endpoint, { broker: other });
          const command = f().message('command', placeOrder);
          const event = f().message('event', orderPlaced);

          await broker.publish(command);
          await broker.publish(event);

          const deliveries = await inbox.take(2);
          expect(deliveries.map((d) => d.facts.messageId).sort()).toEqual([command.id, event.id].sort());
          expect(pick(deliveries, (d) => d.facts.messageId === event.id).facts.handler).toBe('onPlaced');
          for (const delivery of deliveries) {
            expect(delivery.body).toBe(delivery.facts.messageId === command.id ? command.body : event.body);
            await other.ack(delivery.id);
          }
          await inbox.expectNothingWithin();
        });
      });
    });
  });
}
