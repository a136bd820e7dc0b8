/**
 * Builds the orders service's bus. The transport is a parameter, so the same application runs on
 * the in-memory broker (`npm start`, tests) and, later, on Redis by passing another broker.
 */
import { Container } from 'inversify';
import {
  createBus,
  silentLogger,
  type BusOptions,
  type DeadLetterStore,
  type DispatchHooks,
  type HandlerClass,
  type Logger,
  type MessageBroker,
  type MessageBus,
  type RetryOptions,
  type SagaStore,
} from '../../src/index.js';
import {
  ChargePayment,
  NotifyLegacyCrm,
  PlaceOrderHandler,
  ReleaseStockHandler,
  ReserveStockHandler,
  ReserveStockOnOrderPlaced,
  ShipOrderHandler,
} from './handlers.js';
import { OrderFulfilment } from './order-fulfilment.js';
import { ListOrderSummariesHandler, OrderSummaryProjection, OrderSummaryStore } from './projection.js';
import {
  Inventory,
  OrdersTokens,
  SimulatedLegacyCrm,
  SimulatedPaymentGateway,
  type LegacyCrm,
  type PaymentGateway,
} from './services.js';

/** The handler classes of the order-summary read model, kept in memory (projection.ts). */
export const ORDERS_READ_MODEL: readonly HandlerClass[] = [OrderSummaryProjection, ListOrderSummariesHandler];

/** Every handler class of the orders endpoint. */
export const ORDERS_HANDLERS = [
  PlaceOrderHandler,
  ReserveStockOnOrderPlaced,
  ReserveStockHandler,
  ChargePayment,
  NotifyLegacyCrm,
  ShipOrderHandler,
  ReleaseStockHandler,
  ...ORDERS_READ_MODEL,
];

/** Every saga of the orders endpoint. */
export const ORDERS_SAGAS = [OrderFulfilment];

/** How long an order may wait for its payment in production: 15 minutes. */
export const DEFAULT_PAYMENT_DUE_MS = 15 * 60_000;

/** Options of {@link createOrdersBus}. */
export interface OrdersBusOptions {
  /**
   * The transport.
   * @defaultValue a new in-memory broker
   */
  readonly broker?: MessageBroker;
  /**
   * Where dead letters go.
   * @defaultValue a new in-memory store
   */
  readonly deadLetters?: DeadLetterStore;
  /**
   * Lifecycle hooks (handled, retrying, dead-lettered).
   * @defaultValue none
   */
  readonly hooks?: DispatchHooks;
  /**
   * Where Harrier logs what it cannot throw.
   * @defaultValue silentLogger
   */
  readonly logger?: Logger;
  /**
   * Retry policy of handlers that set none.
   * @defaultValue 5 attempts, no immediate retry, backoff from 250 ms, capped at 2 s (short, so the example's retries show in seconds, long enough that o-1002's stock is reserved before its payment gets through)
   */
  readonly retry?: RetryOptions;
  /**
   * The payment gateway.
   * @defaultValue a simulated gateway that always succeeds
   */
  readonly paymentGateway?: PaymentGateway;
  /**
   * The legacy CRM.
   * @defaultValue a simulated CRM that is available
   */
  readonly legacyCrm?: LegacyCrm;
  /**
   * The warehouse.
   * @defaultValue an inventory that is never busy
   */
  readonly inventory?: Inventory;
  /**
   * Where the fulfilment saga's instances are stored.
   * @defaultValue a new in-memory store
   */
  readonly sagaStore?: SagaStore;
  /**
   * How long after an order is placed the fulfilment saga cancels it when it is still unpaid.
   * @defaultValue {@link DEFAULT_PAYMENT_DUE_MS} (15 minutes)
   */
  readonly paymentDueMs?: number;
  /**
   * The handler classes of the order-summary read model: a projection named `OrderSummary` and the
   * handler of ListOrderSummaries (postgres-read-model.ts keeps it in PostgreSQL).
   * @defaultValue {@link ORDERS_READ_MODEL}, in memory
   */
  readonly readModel?: readonly HandlerClass[];
  /**
   * Where the event log, projection checkpoints and handler transactions are (see BusOptions).
   * @defaultValue none: projections are fed by the broker, handlers run without a transaction
   */
  readonly storage?: Pick<BusOptions, 'eventLog' | 'checkpoints' | 'unitOfWork'>;
  /**
   * Tracing and metrics (`harrierTracing()` from harrier/telemetry; see traced-main.ts).
   * @defaultValue none
   */
  readonly telemetry?: BusOptions['telemetry'];
}

/**
 * Creates the bus of the `orders` endpoint with its container: services are bound once in the root
 * container; Harrier resolves each handler from a child container made for its message.
 */
export function createOrdersBus(options: OrdersBusOptions = {}): MessageBus {
  const container = new Container();
  container.bind(OrderSummaryStore).toSelf().inSingletonScope();
  container.bind(Inventory).toConstantValue(options.inventory ?? new Inventory());
  container
    .bind<number>(OrdersTokens.PaymentDueMs)
    .toConstantValue(options.paymentDueMs ?? DEFAULT_PAYMENT_DUE_MS);
  container
    .bind<PaymentGateway>(OrdersTokens.PaymentGateway)
    .toConstantValue(options.paymentGateway ?? new SimulatedPaymentGateway());
  container
    .bind<LegacyCrm>(OrdersTokens.LegacyCrm)
    .toConstantValue(options.legacyCrm ?? new SimulatedLegacyCrm({ available: true }));

  return createBus({
    endpoint: 'orders',
    container,
    handlers:
      options.readModel === undefined
        ? ORDERS_HANDLERS
        : [
            ...ORDERS_HANDLERS.filter((handler) => !ORDERS_READ_MODEL.includes(handler)),
            ...options.readModel,
          ],
    sagas: ORDERS_SAGAS,
    retry: options.retry ?? { attempts: 5, immediate: 0, backoff: { baseMs: 250, maxMs: 2_000 } },
    logger: options.logger ?? silentLogger,
    ...(options.broker !== undefined ? { broker: options.broker } : {}),
    ...(options.deadLetters !== undefined ? { deadLetters: options.deadLetters } : {}),
    ...(options.hooks !== undefined ? { hooks: options.hooks } : {}),
    ...(options.sagaStore !== undefined ? { sagaStore: options.sagaStore } : {}),
    ...(options.telemetry !== undefined ? { telemetry: options.telemetry } : {}),
    ...options.storage,
  });
}
